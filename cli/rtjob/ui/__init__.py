"""`rtjob ui`: the local, read-only web app (app.py: routes and safety; queries.py: what it shows)."""
