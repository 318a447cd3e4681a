"""A community-threads moderation pipeline built on the engine: fetch a thread (slow, a remote
forum API), classify it (fast), write a verdict (fast). Its own tables and transitions live in
schema `moderation`; the engine replaces only the queue and worker mechanics."""
