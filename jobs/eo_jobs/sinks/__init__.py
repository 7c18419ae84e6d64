"""Sink participants: prepare / commit / roll back writes for the commit protocol."""
