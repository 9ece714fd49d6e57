"""Gates: what a stage waits on before it widens (windows, freezes, health, applied versions)."""
