-- Every node (coordinator and workers), in the database groupml will run in.
CREATE EXTENSION IF NOT EXISTS citus;
