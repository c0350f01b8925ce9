"""The domain model: pure, frozen, typed. No I/O imports here."""
