-- The coordinator, once every node runs 10-citus-node.sql. psql variables:
--   coordinator_host, coordinator_port: how the workers reach the coordinator
--   worker_hosts, worker_ports: the workers, comma-separated, in the same order
\set ON_ERROR_STOP on
SELECT citus_set_coordinator_host(:'coordinator_host', :coordinator_port);
SELECT citus_add_node(w.host, w.port::int)
  FROM unnest(string_to_array(:'worker_hosts', ','), string_to_array(:'worker_ports', ',')) AS w(host, port)
 WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node n WHERE n.nodename = w.host AND n.nodeport = w.port::int);
-- Citus sends CREATE EXTENSION to every worker (and to workers added later); the files of
-- groupml, PL/Python and the Python packages must be installed on every node.
CREATE EXTENSION IF NOT EXISTS groupml CASCADE;
SELECT nodename, nodeport, noderole, isactive FROM pg_dist_node ORDER BY nodeid;
