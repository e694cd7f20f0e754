"""Commitment of verdicts: RFC 6962 Merkle leaves, roots and inclusion proofs."""
