"""Use cases without Click: plan a run once, attach or submit, follow it (with the backend's retries), price it.

The commands layer parses flags and prints; everything it does to a run goes through here."""
