project = "django-jobs"
html_theme = "furo"
exclude_patterns = ["_build"]
