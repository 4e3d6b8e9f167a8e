"""Small helpers every part uses: JSON files, display paths, the metric writer, workdir checks and lock."""
