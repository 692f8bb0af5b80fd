"""groupml: GROUP BY for machine learning, inside PostgreSQL.

The package is imported by PL/Python inside the server backend and by the
tests/benchmarks on the client. Algorithms live in pure-Python subpackages
(``learners``, ``search``, ``planner``, ``tenancy``) that never import ``plpy``;
the only modules that talk to the database are ``groupml.db`` and ``groupml.udf``.
"""

__version__ = "0.3.0"
