"""Test support shared by unit and end-to-end tests (scripted provider, provider replay helpers)."""
