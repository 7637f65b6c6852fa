"""A minimal Django project running ilmek's checkout flow on Django's own connection.

``settings.py`` (one Postgres database from ``DATABASE_URL``), ``urls.py``
and ``views.py`` are the whole project: no apps, no models, no migrations.
Run it from the root of a clone with ``.venv/bin/python -m examples.django_app``
(see ``__main__.py``).
"""
