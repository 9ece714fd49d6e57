"""Gates: what a stage waits on before it widens (change windows, freezes, applied versions), and
the templates of its checks."""
