from evidence_lib.bundle.cli import main

if __name__ == "__main__":  # multiprocessing's spawn imports this module in its children
    raise SystemExit(main())
