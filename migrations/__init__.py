"""The plain-SQL migrations, one folder per dialect, shipped with the package as data."""
