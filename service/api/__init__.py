"""The protocols: v1, V2 (Open Inference Protocol), IIIF; schemas and body decoding."""
