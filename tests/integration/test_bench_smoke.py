"""Every benchmark script still runs, at a tiny size, to its comparison.

The scripts in bench/ are run by hand, so nothing else notices when the code under them
changes (a wrapper missing a new Trainer method, say) while docs/performance.md keeps their
figures. Each script here runs once, small,
and must exit 0 and print the line that compares groupml with its alternative (or the
figure the script exists for). No timing is asserted; the cluster scripts start their own
throwaway cluster, as they do when run by hand.
"""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")

# script -> (arguments of a small run, a regular expression its output must match)
RUNS = {
    "bench_bandit.py": (["--quick", "--trials", "20", "--seeds", "1-2", "--jobs", "2"],
                        r"over 2 random searches.*\n(.*\n)*  all: \d+\.\d% fewer configuration-passes"),
    "bench_batching.py": (["--rows", "1500", "--models", "4", "--iters", "3", "--repeat", "1"],
                          r"\n +100 +1500 +2 .*x +\d+ +\d+\.\d+x"),
    "bench_batching.py --scan": (["--scan", "--rows", "1500", "--models", "4", "--iters", "2", "--repeat", "1"],
                                 r"scan-bound.*\n(.*\n)* +1000 +1500 +2 .*\d+\.\d+x"),
    "bench_calibration.py": (["--rows", "2000", "--families", "logistic"],
                             r"\nlogistic +gtp +\d"),
    "bench_checkpoint.py": (["--rows", "2000", "--configs", "2", "--repeat", "1"],
                            r"capture checkpoint state: +\d"),
    "bench_demo.py": (["--rows", "4000", "--groups", "4", "--skip-pandas", "--workers", "2"],
                      r"client-copy-1core .*\n(.*\n)*ours-procedure: \d+\.\d+x faster than the fastest client path"),
    "bench_grouped.py": (["--rows", "3000", "--features", "5", "--pattern-rows", "1000", "--repeat", "1",
                          "--patterns", "glm"],
                         r"client \(COPY\+pandas\+sklearn, joblib 2 processes\) .*x best strategy "
                         r".*x faster than the fastest client"),
    "bench_mop.py": (["--rows", "1500", "--configs", "2", "--epochs", "1"],
                     r"mop: \d+\.\d+x task-parallel speed at 0\.50 of its storage; \d+\.\d+x faster than data-parallel"),
    "bench_ingest.py": (["--rows", "4000", "--groups", "4"], r"ratio snapshot load / COPY BINARY: \d"),
    "bench_learners.py": (["--rows", "4000"], r"scikit-learn loop \(lbfgs\): .*speed-up \d+\.\d+x"),
    "bench_predict.py": (["--rows", "1500", "--groups", "3", "--models", "logistic", "--repeat", "1"],
                         r"client-copy \(\d processes\)(.|\n)*ours-batch \(new session\) .*x client(.|\n)*"
                         r"set-table \(predict_table\) .*x client-rt"),
    "bench_scaleout.py": (["--rows", "6000", "--groups", "6", "--features", "4"],
                          r"citus train_groups \(2 workers\) +\d+\.\d+ +\d+ +0\.\d+(.*\n)* +32 nodes: "),
    "bench_search_methods.py": (["--quick", "--configs", "4", "--max-epochs", "2", "--seeds", "1"],
                                r"\n\S.* +hyperband +\d+ "),
    "bench_tenancy_e2e.py": (["--quick", "--tenants", "2", "--repeats", "1", "--scale", "0.05"],
                             r"best interleaving of round-robin"),
    "bench_tenancy_gp.py": (["--seeds", "1", "--aware-only", "--variants", "ours"],
                            r"SYN\(0\.5,1\.0\) +aware +roundrobin"),
    "bench_tenancy_sim.py": (["--quick", "--seeds", "1", "--users", "20", "--models", "10", "--tenants", "3"],
                             r"per-seed means: <= 0\.05: RR"),
}


def test_every_benchmark_script_has_a_small_run():
    scripts = sorted(f for f in os.listdir(BENCH) if f.startswith("bench_") and f.endswith(".py"))
    assert scripts == sorted({k.split()[0] for k in RUNS})


@pytest.mark.parametrize("name", sorted(RUNS))
def test_benchmark_runs_to_its_comparison(name, postgresql_cluster):
    # postgresql_cluster: the working tree's extension files are in the server's extension
    # directory before a script's own cluster creates the extension
    args, expected = RUNS[name]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, os.path.join(BENCH, name.split()[0])] + args, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert re.search(expected, proc.stdout), f"{name} printed no comparison:\n{proc.stdout[-3000:]}"
