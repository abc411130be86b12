"""One router per resource: health, models, query, render, classify."""
