-- groupml 0.2.0 -> 0.3.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.3.0'" to load this file. \quit
