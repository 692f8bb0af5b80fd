CREATE TABLE @extschema@.worker_endpoints (
    name     text PRIMARY KEY,
    dsn      text NOT NULL,                 -- libpq DSN or URI; 'loopback' = this server as the calling role
    enabled  boolean NOT NULL DEFAULT true,
    comment  text
);
COMMENT ON TABLE @extschema@.worker_endpoints IS
  'Worker backends train_groups may use (workers => p takes the first p enabled rows by name). Empty: p loopback connections to this server as the calling role; rows but none enabled: an error. Every endpoint must reach this server and database (workers read its snapshot tables). Passwords in DSNs are never logged or shown in errors.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.worker_endpoints', '');
