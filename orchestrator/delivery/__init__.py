"""Delivery: a project's work back to the user's git remote as branches and a pull request, as an
exactly-once outbox step (DESIGN.md rule 10)."""
