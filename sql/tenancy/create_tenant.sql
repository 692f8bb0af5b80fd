CREATE FUNCTION @extschema@.create_tenant(name text, role name DEFAULT current_user)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import create_tenant; return create_tenant(name, role)
$python$;
COMMENT ON FUNCTION @extschema@.create_tenant(text, name) IS
  'Create a tenant bound to a role (default: the calling role) and return its tenant_id. Binding another role needs membership in it or groupml_admin. See groupml.help(''create_tenant'').';
