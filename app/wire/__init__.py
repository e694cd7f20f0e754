"""What travels between processes: the ZAP v1 frame codec (docs/wire-format.md) and the
signature encodings a client may send.  Shared by the API, NIC ingest and the client."""
