"""learn_over_groups on a Citus distributed table: a coordinator and two workers on loopback."""

import re

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification

from groupml.shards import citus_shard_map

from multinode import ClientSession, assert_same_fits, group_fits, shard_map_in_backend

pytestmark = [pytest.mark.integration, pytest.mark.citus]


@pytest.fixture(scope="module")
def clicks(citus_cluster):
    """``clicks`` distributed by country, ``clicks_local`` the same rows in one plain table on the
    coordinator (the one-server run), ``segment`` a column the distribution does not follow."""
    data = grouped_classification(3000, 6, 4, seed=5, exponent=0.6)
    with citus_cluster.connect() as conn:
        for table in ("clicks", "clicks_local"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            create_table(conn, table, data)
            conn.execute(f"ALTER TABLE {table} ADD COLUMN segment int")
            conn.execute(f"UPDATE {table} SET segment = id % 3")
        conn.execute("SELECT create_distributed_table('clicks', 'country', shard_count := 4)")
    return data


def test_extension_reaches_every_worker(citus_cluster):
    with citus_cluster.connect() as conn:
        version = conn.execute("SELECT groupml.version()").fetchone()[0]
    for worker in citus_cluster.workers:
        with psycopg.connect(worker.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()
            assert conn.execute("SELECT groupml.version()").fetchone()[0] == version


def explain(conn, key):
    return "\n".join(r[0] for r in conn.execute(
        f"EXPLAIN (VERBOSE) SELECT {key}, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, 'logistic', "
        f"'{{}}') FROM clicks GROUP BY {key}").fetchall())


def test_grouped_by_the_distribution_column_runs_in_the_shard_tasks(citus_cluster, clicks):
    """Each shard's task on its worker runs the whole aggregate; the coordinator only collects fits."""
    with citus_cluster.connect() as conn:
        plan = explain(conn, "country")
        task_query = next(line for line in plan.splitlines() if "Query:" in line)
        assert "groupml.learn_over_groups(" in task_query and "GROUP BY country" in task_query, plan
        assert "clicks_10" in task_query, plan                     # it reads a shard table
        top = plan.split("->  Task", 1)[0]
        assert "learn_over_groups(" not in top.split("Output:", 1)[0], plan   # nothing aggregated above
        ports = {int(p) for p in re.findall(r"Node: host=127.0.0.1 port=(\d+)", plan)}
        assert ports <= {w.port for w in citus_cluster.workers} and ports, plan
        assert_same_fits(group_fits(conn, "clicks", "country"), group_fits(conn, "clicks_local", "country"))


def test_other_groupings_gather_the_rows_and_equal_one_server(citus_cluster, clicks):
    """Grouped by a column the distribution does not follow, Citus sends the aggregate's inputs to
    the coordinator (the aggregate has no combine function) and the fits are the one-server fits."""
    with citus_cluster.connect() as conn:
        plan = explain(conn, "segment")
        top, tasks = plan.split("->  Task", 1)
        assert "groupml.learn_over_groups(remote_scan." in top, plan
        assert "learn_over_groups(" not in tasks.replace("AS learn_over_groups", ""), plan
        assert_same_fits(group_fits(conn, "clicks", "segment"), group_fits(conn, "clicks_local", "segment"))
        # a grouping that mixes the distribution column with another one is pushed down whole
        assert_same_fits(group_fits(conn, "clicks", "country, segment"),
                         group_fits(conn, "clicks_local", "country, segment"))


def received_bytes(conn, key):
    """Citus' count of the bytes the coordinator received from the workers for the query. (EXPLAIN
    ANALYZE returns a composite column through binary transfer that Citus then reads as text: a
    malformed record literal error, so binary transfer off for it.)"""
    conn.execute("SET citus.enable_binary_protocol = off")
    plan = "\n".join(r[0] for r in conn.execute(
        f"EXPLAIN (ANALYZE, VERBOSE) SELECT {key}, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, "
        f"'logistic', '{{}}') FROM clicks GROUP BY {key}").fetchall())
    found = re.search(r"Tuple data received from nodes: (\d+) (bytes|kB|MB)", plan)
    assert found, plan
    return int(found.group(1)) * {"bytes": 1, "kB": 1024, "MB": 1024 ** 2}[found.group(2)]


def test_the_rows_stay_on_the_workers_only_when_the_groups_follow_the_distribution(citus_cluster, clicks):
    rows = len(clicks["id"])
    with citus_cluster.connect() as conn:
        pushed, gathered = received_bytes(conn, "country"), received_bytes(conn, "segment")
    assert gathered > rows * 4 * 8                 # at least every row's four features
    assert pushed < gathered / 5, (pushed, gathered)   # six fits


def test_shard_map_of_a_distributed_table(citus_cluster, clicks):
    with citus_cluster.connect() as conn:
        shard_map = citus_shard_map(ClientSession(conn), "clicks")
        assert shard_map.relation == "clicks" and shard_map.distribution_column == "country"
        assert len(shard_map.shards) == 4
        assert shard_map.nodes() == sorted(("127.0.0.1", w.port) for w in citus_cluster.workers)
        total = 0
        for shard in shard_map.shards:
            assert shard.replicas == 1 and shard.active_placements() == shard.placements
            assert shard.table == f"clicks_{shard.shard_id}" and shard.schema == "public"
            place = shard.placements[0]
            with psycopg.connect(f"host={place.host} port={place.port} dbname=postgres user=postgres") as node:
                held = node.execute(f'SELECT count(*) FROM "{shard.schema}"."{shard.table}"').fetchone()[0]
            want = conn.execute("SELECT count(*) FROM clicks WHERE get_shard_id_for_distribution_column("
                                "'clicks', country) = %s", [shard.shard_id]).fetchone()[0]
            assert held == want
            total += held
        assert total == conn.execute("SELECT count(*) FROM clicks").fetchone()[0]
        assert {s.shard_id for s in shard_map.shards_on(*shard_map.nodes()[0])} < {s.shard_id for s in shard_map.shards}


def test_shard_map_lists_every_placement_of_a_replicated_table(citus_cluster, clicks):
    with citus_cluster.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS clicks_replicated")
        conn.execute("CREATE TABLE clicks_replicated AS SELECT * FROM clicks_local")
        conn.execute("SET citus.shard_replication_factor = 2")
        conn.execute("SELECT create_distributed_table('clicks_replicated', 'country', shard_count := 2, "
                     "colocate_with := 'none')")
        shard_map = citus_shard_map(ClientSession(conn), "clicks_replicated")
        workers = sorted(("127.0.0.1", w.port) for w in citus_cluster.workers)
        assert len(shard_map.shards) == 2
        for shard in shard_map.shards:
            assert shard.replicas == 2 and len(shard.active_placements()) == 2
            assert sorted((p.host, p.port) for p in shard.placements) == workers
        assert shard_map.colocation_id != citus_shard_map(ClientSession(conn), "clicks").colocation_id


def test_shard_map_of_a_reference_table(citus_cluster, clicks):
    with citus_cluster.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS countries")
        conn.execute("CREATE TABLE countries AS SELECT DISTINCT country FROM clicks_local")
        conn.execute("SELECT create_reference_table('countries')")
        shard_map = citus_shard_map(ClientSession(conn), "countries")
    assert shard_map.distribution_column is None and len(shard_map.shards) == 1
    held = {(p.host, p.port) for p in shard_map.shards[0].placements}
    assert held >= {("127.0.0.1", w.port) for w in citus_cluster.workers}


def test_shard_map_reads_the_same_inside_the_server(citus_cluster, clicks):
    with citus_cluster.connect() as conn:
        conn.execute("SELECT groupml.version()")          # groupml's sys.path in this backend
        assert shard_map_in_backend(conn, "citus_shard_map", "public.clicks") == \
            repr(citus_shard_map(ClientSession(conn), "public.clicks"))


def test_shard_map_refuses_a_plain_table(citus_cluster, clicks):
    from groupml.errors import UndefinedTableError, WrongObjectTypeError

    with citus_cluster.connect() as conn:
        with pytest.raises(WrongObjectTypeError, match="clicks_local is not a Citus distributed table"):
            citus_shard_map(ClientSession(conn), "clicks_local")
        with pytest.raises(UndefinedTableError):
            citus_shard_map(ClientSession(conn), "no_such_table")


def test_without_citus_the_tests_skip_naming_the_build_script_and_fail_under_ci(tmp_path, monkeypatch):
    from multinode import require_citus

    fake = tmp_path / "pg_config"
    fake.write_text(f"#!/bin/sh\necho 'PKGLIBDIR = {tmp_path}'\n")
    fake.chmod(0o755)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"sudo bash \.\./shared/citus/build-citus\.sh"):
        require_citus(str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the Citus tests"):
        require_citus(str(tmp_path))
    (tmp_path / "citus.so").write_bytes(b"")
    require_citus(str(tmp_path))


def test_the_workers_run_the_tasks_as_the_calling_role(citus_cluster, clicks):
    """A non-superuser's grouped query reaches the workers as that role (its own rights on the
    shards), and the role cannot change how Citus connects (citus.node_conninfo)."""
    with citus_cluster.connect() as admin:
        admin.execute("DROP ROLE IF EXISTS analyst")
        admin.execute("CREATE ROLE analyst LOGIN")          # Citus creates it on the workers too
        admin.execute("GRANT USAGE ON SCHEMA groupml TO analyst")
        try:
            with citus_cluster.connect("analyst") as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    group_fits(conn, "clicks", "country")
                admin.execute("GRANT SELECT ON clicks TO analyst")
                assert len(group_fits(conn, "clicks", "country")) == 6
                users = set()
                for worker in citus_cluster.workers:    # the task connections Citus keeps open
                    with psycopg.connect(worker.dsn(), autocommit=True) as node:
                        users |= {r[0] for r in node.execute(
                            "SELECT usename FROM pg_stat_activity WHERE application_name LIKE 'citus_internal%%' "
                            "AND pid <> pg_backend_pid()").fetchall()}
                assert "analyst" in users, users
                with pytest.raises(psycopg.errors.CantChangeRuntimeParam):
                    conn.execute("SET citus.node_conninfo = 'sslmode=disable user=postgres'")
        finally:
            admin.execute("REVOKE ALL ON clicks FROM analyst")
            admin.execute("REVOKE USAGE ON SCHEMA groupml FROM analyst")
            admin.execute("DROP ROLE analyst")
