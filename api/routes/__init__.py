"""Routes, one module per resource; each exports `routes`."""
