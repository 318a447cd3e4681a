"""What an application calls: typed v1 (`v1`) and v2 (`v2`) engine calls, flow definitions
(`flows`), queue names (`queues`), task messages (`messages`), JSON types (`jsontypes`), the
SQLSTATE registry (`sqlstates`) and the v2 envelope (`limits`). Needs only psycopg connections."""
