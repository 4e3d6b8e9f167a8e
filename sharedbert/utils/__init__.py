"""Small helpers every part uses: JSON files, display paths, the metric writer, report
formatting, workdir checks and lock."""
