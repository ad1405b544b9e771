"""What the coordinator and the workers both import: settings, models, schemas, events, errors."""
