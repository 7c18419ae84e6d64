"""Tests that run what the documentation tells people to run."""
