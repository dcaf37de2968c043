#!/usr/bin/env bash
# Runs scripts/slurm/ga-run.sbatch under a real Slurm: a throwaway
# single-node cluster on this machine (Debian's slurm-wlm and munge, its
# own munged, slurmctld and slurmd on 127.0.0.1, every file in one
# temporary directory), then checks, with the synthetic test double:
#   a. srun -n 3 ga-run: one search (1 driver + 2 evaluators) whose rows
#      equal a plain ga-run's;
#   b. sbatch of the script on a node without GPUs completes and prints the
#      report; without EVALUATORS_PER_NODE there, or with too few task
#      slots, it refuses (exit 2);
#   c. scancel -s TERM (the steps, as the time-limit signal): the driver
#      stops (exit 75), the script requeues the job, which resumes;
#      scancel --batch -s TERM (the batch shell): exit 75, no requeue;
#      --time with --signal=TERM@N: stop, requeue, resume;
#   d. kill -9 of an evaluator, and of the driver: the step ends, the job
#      fails (not 75), a resubmission resumes;
#   e. preemption by a job of a higher partition tier (PreemptMode=REQUEUE,
#      GraceTime): the driver stops, the job is requeued and resumes;
# and that every search, stopped or not, stored the rows of a plain ga-run.
# Then it stops the cluster and removes the directory (kept on failure).
#
#   scripts/slurm/check_local_slurm.sh [path/to/ga-run]    # as root
#
# Exit status: 0 passed; 1 failed; 77 skipped (not root, Slurm missing and
# no apt-get, ga-run built without MPI), the reason on stderr. It installs
# slurm-wlm and munge with apt-get when slurmctld is missing. Every wait is
# bounded; about 2 minutes on a 2-core machine once the packages are there.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
ga_run=$(realpath -m "${1:-$repo/build/ga-run}")
sbatch_script="$repo/scripts/slurm/ga-run.sbatch"
# Not Slurm's default ports, so that a Slurm already on this host is left alone.
ctld_port=${MIDTUNE_SLURM_PORT:-16817}

say() { printf '%s check_local_slurm: %s\n' "$(date +%T)" "$*"; }
skip() { echo "check_local_slurm: skipped: $*" >&2; exit 77; }
fail() { echo "check_local_slurm: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (installs packages, starts munged, slurmctld and slurmd)"
[ -x "$ga_run" ] || skip "no $ga_run (cmake --build build --target ga-run)"
# grep reads all of its input (no -q) in every pipe here: under pipefail a
# grep -q that quits at the first match kills the writer with SIGPIPE, and
# the pipe then fails although the line was there.
ldd "$ga_run" | grep 'libmpi\.so' >/dev/null || skip "$ga_run was built without MPI"
command -v sqlite3 >/dev/null || skip "no sqlite3 (scripts/setup.sh installs it)"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  command -v apt-get >/dev/null || skip "Slurm is not installed and there is no apt-get to install it"
  say "installing slurm-wlm and munge"
  # Bounded: a mirror that stalls must not hang the check.
  { DEBIAN_FRONTEND=noninteractive timeout 300 apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q slurm-wlm munge; } >&2 ||
    fail "apt-get install slurm-wlm munge failed"
fi

dir=$(mktemp -d /tmp/midtune-slurm.XXXXXX)
# Slurm's daemons and the tasks (all root here) walk into it.
chmod 711 "$dir"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/w"
chmod 700 "$dir/munge"
export SLURM_CONF="$dir/slurm.conf"
node=$(hostname -s)
passed=0

# Stops what this script started (its jobs, slurmctld, slurmd, munged, by
# their pid files) and removes the directory, or keeps it after a failure.
teardown() {
  set +e
  # Every job on this throwaway cluster is this script's.
  timeout 20 scancel --user="$(id -un)" 2>/dev/null
  # The jobs' steps end before the daemons do (slurmstepd outlives slurmd).
  for _ in $(seq 30); do
    [ -z "$(timeout 10 squeue -h 2>/dev/null)" ] && break
    sleep 1
  done
  timeout 20 scontrol shutdown >/dev/null 2>&1
  for pidfile in "$dir/slurmctld.pid" "$dir/slurmd.pid" "$dir/munge/munged.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null
  done
  if [ "$passed" = 1 ]; then
    rm -rf "$dir"
  else
    echo "check_local_slurm: logs kept in $dir (log/, w/ga-run-*.log)" >&2
    tail -n 20 "$dir"/log/*.log >&2 2>/dev/null
  fi
}
trap teardown EXIT
# A timeout's SIGTERM, or Ctrl-C, still stops the cluster (through EXIT).
trap 'fail "interrupted"' TERM INT

# --- The cluster --------------------------------------------------------
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
chmod 711 "$dir/munge"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --log-file="$dir/munge/munged.log" --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" ||
  fail "munged did not start ($dir/munge/munged.log)"
mkdir -p "$dir/log"
: > "$dir/plugstack.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=midtune-check
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job waits cred_expire seconds before it runs again (default 120).
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
# No cgroups needed: the check runs in containers too.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Slurm's default, as on many clusters: the sbatch script must pick PMIx itself.
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Ended jobs stay visible to scontrol (state, exit code, restarts) this long.
MinJobAge=600
KillWait=10
# More CPUs than the host has (config_overrides accepts that): the jobs
# mostly sleep (the test double), and several run at once.
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=32 RealMemory=1000 State=UNKNOWN
# The searches run in "check"; a job in "urgent" preempts them (e):
# SIGTERM to their steps, up to GraceTime to stop, then requeued.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=check Nodes=$node Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
PartitionName=urgent Nodes=$node MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" -N "$node" || fail "slurmd did not start"

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every second until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || fail "no $what within ${limit}s"
    sleep 1
  done
}
node_idle() { timeout 10 sinfo -h -n "$node" -o %t 2>/dev/null | grep -x idle >/dev/null; }
wait_for 60 "idle node in sinfo" node_idle
say "cluster up: $(timeout 10 sinfo -V), node $node, ports $ctld_port-$((ctld_port + 1))"
timeout 10 srun --mpi=list 2>&1 | grep -w pmix >/dev/null || fail "srun has no pmix MPI plugin (srun --mpi=list)"

# --- Experiments --------------------------------------------------------
w="$dir/w"
cd "$w"
# experiment FILE LATENCY_MS: the synthetic test double, 7 generations of
# 10; the latency (a sleep per unit, no CPU) sets how long a search lasts
# and is outside the experiment's identity, so every file gives the same rows.
experiment() {
  cat > "$1" <<EOF
name: slurm-check
seed: 77
backend: {kind: synthetic-test-double, layers: 12, heads: 2, noise: 0.05, latency_ms: $2}
dataset: {kind: kv, pairs: 6, gold_positions: [0.0, 0.5, 1.0], search_samples: 8, heldout_samples: 8, metric: teacher_forced}
objective:
  kind: lpes
  lpes: {curve: bezier, degree: 3}
search:
  strategy: ga
  ga: {population: 10, parents: 4, generations: 6, mutants: 4, crossovers: 2}
EOF
}
experiment quick.yaml 60
experiment slow.yaml 300

# Rows that must be the same for every search: each sample (gold
# log-probability to 17 digits) and each individual with its fitness.
rows() {
  sqlite3 "$1" "SELECT e.cache_key, s.sample_id, s.gold_position, s.correct, s.output,
                       printf('%.17g', s.gold_logprob)
                FROM sample_results s JOIN evaluations e ON e.id = s.evaluation_id ORDER BY 1, 2;
                SELECT candidate_id, generation, genome, printf('%.17g', fitness)
                FROM individuals ORDER BY candidate_id"
}
same_rows() {
  rows "$w/$1.db" > "$w/$1.rows" || fail "$1: cannot read $w/$1.db"
  cmp -s "$w/plain.rows" "$w/$1.rows" || fail "$1: rows differ from the plain run's (diff $w/plain.rows $w/$1.rows)"
}

say "plain ga-run (the reference rows)"
timeout 120 "$ga_run" quick.yaml --db plain.db -q > plain.log 2>&1 || fail "plain ga-run failed (plain.log)"
rows plain.db > plain.rows
[ "$(wc -l < plain.rows)" -gt 100 ] || fail "the plain run stored $(wc -l < plain.rows) rows"

# submit NAME YAML [sbatch options]: the sbatch script on this GPU-less node,
# 1 driver + 2 evaluators; prints the job id.
submit() {
  local name=$1 yaml=$2
  shift 2
  local id
  id=$(EVALUATORS_PER_NODE=2 GA_RUN="$ga_run" timeout 20 sbatch --parsable --gpus-per-node=0 \
    --ntasks-per-node=3 --cpus-per-task=1 --job-name="$name" --output="$w/ga-run-%j.log" "$@" \
    "$sbatch_script" "$yaml" --db "$w/$name.db") || fail "$name: sbatch failed"
  echo "$id"
}
field() { timeout 10 scontrol show job -o "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
state_is() { [ "$(field "$1" JobState)" = "$2" ]; }
ended() { case "$(field "$1" JobState)" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) true ;; *) false ;; esac; }
logged() { grep -q -- "$2" "$w/ga-run-$1.log" 2>/dev/null; }
# The pid of the task of job $1 with rank $2, from the processes' environments.
task_pid() {
  local p
  for p in $(pgrep -x ga-run); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -x "SLURM_JOB_ID=$1" >/dev/null &&
       tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -x "SLURM_PROCID=$2" >/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
expect() { # JOB NAME STATE EXITCODE
  wait_for 120 "end of $2 (job $1)" ended "$1"
  local s e
  s=$(field "$1" JobState) e=$(field "$1" ExitCode)
  if [ "$s" != "$3" ] || [ "$e" != "$4" ]; then fail "$2 (job $1): $s $e, expected $3 $4 (ga-run-$1.log)"; fi
  say "$2 (job $1): $s, exit $e"
}

# --- The searches, all at once ------------------------------------------
say "a: srun -n 3 --mpi=pmix ga-run"
timeout 180 srun -n 3 --mpi=pmix "$ga_run" quick.yaml --db "$w/srun.db" > srun.log 2>&1 &
srun_pid=$!

say "b, c, d: submitting"
refused=$(EVALUATORS_PER_NODE='' GA_RUN="$ga_run" timeout 20 sbatch --parsable --gpus-per-node=0 \
  --ntasks-per-node=3 --cpus-per-task=1 --output="$w/ga-run-%j.log" "$sbatch_script" quick.yaml \
  --db "$w/refused.db") || fail "sbatch failed"
short=$(EVALUATORS_PER_NODE=3 GA_RUN="$ga_run" timeout 20 sbatch --parsable --gpus-per-node=0 \
  --ntasks-per-node=3 --cpus-per-task=1 --output="$w/ga-run-%j.log" "$sbatch_script" quick.yaml \
  --db "$w/short.db") || fail "sbatch failed"
whole_job=$(submit whole quick.yaml)
term_job=$(submit term slow.yaml)
batch_job=$(submit batch slow.yaml)
kill1_job=$(submit kill1 slow.yaml)
kill0_job=$(submit kill0 slow.yaml)
# The time limit: 1 minute, SIGTERM 30 s before it (Slurm sends it up to
# half a minute early); the search lasts about 80 s at 1 s a unit.
experiment limit.yaml 1000
limit_job=$(submit limit limit.yaml --time=1 --signal=TERM@30)

# Stop or kill each once its first generation is stored, so the resume has
# something to resume from.
gen1() { logged "$1" "generation 1/"; }
for j in "$term_job" "$batch_job" "$kill1_job" "$kill0_job"; do wait_for 90 "generation 1 of job $j" gen1 "$j"; done
say "c: scancel -s TERM $term_job (the steps); scancel --batch -s TERM $batch_job (the batch shell)"
timeout 10 scancel -s TERM "$term_job"
timeout 10 scancel --batch -s TERM "$batch_job"
for rank in 1 0; do
  var=kill${rank}_job
  pid=$(task_pid "${!var}" "$rank") || fail "no rank $rank of job ${!var}"
  say "d: kill -9 rank $rank (pid $pid) of job ${!var}"
  kill -9 "$pid"
  # --kill-on-bad-exit: srun sends the other tasks SIGTERM (the driver
  # stops, waiting for the dead rank's unit; evaluators ignore it) and
  # SIGKILL KillWait (10 s here) later: about 11 s; 30 s for a loaded machine.
  wait_for 30 "end of job ${!var} after the kill" ended "${!var}"
done

expect "$refused" "b: no EVALUATORS_PER_NODE on a GPU-less node" FAILED 2:0
logged "$refused" "set EVALUATORS_PER_NODE" || fail "job $refused did not say why it refused"
expect "$short" "b: 3 evaluators in 3 task slots" FAILED 2:0
logged "$short" "need --ntasks-per-node=4" || fail "job $short did not say why it refused"
expect "$batch_job" "c: scancel --batch -s TERM" FAILED 75:0
logged "$batch_job" "(exit 75)" || fail "job $batch_job: no stop by SIGTERM in its log"
! logged "$batch_job" "requeueing" || fail "job $batch_job requeued itself after scancel --batch"
for j in "$kill1_job" "$kill0_job"; do
  e=$(field "$j" ExitCode)
  if [ "$(field "$j" JobState)" != FAILED ] || [ "$e" = 0:0 ] || [ "$e" = 75:0 ]; then
    fail "job $j after kill -9: $(field "$j" JobState) $e, expected FAILED with neither 0 nor 75"
  fi
  say "d: job $j after kill -9: FAILED, exit $e"
done

say "c, d: resubmitting the stopped and killed searches"
batch2_job=$(submit batch slow.yaml)
kill1b_job=$(submit kill1 quick.yaml)
kill0b_job=$(submit kill0 quick.yaml)

# The time-limit stop: the job requeues itself; its second run gets time to
# finish (and a shorter sleep, which the rows do not depend on).
restarted() { [ "$(field "$1" Restarts)" != 0 ] && [ -n "$(field "$1" Restarts)" ]; }
wait_for 100 "requeue of job $limit_job at its time limit" restarted "$limit_job"
logged "$limit_job" "(exit 75)" || fail "job $limit_job: no stop by SIGTERM in its log"
say "c: job $limit_job stopped before its time limit and requeued itself"
experiment limit.yaml 60
timeout 10 scontrol update JobId="$limit_job" TimeLimit=10

wait_for 100 "requeue of job $term_job" restarted "$term_job"
expect "$term_job" "c: scancel -s TERM, requeued, resumed" COMPLETED 0:0
for j in "$term_job" "$limit_job"; do
  logged "$j" "requeueing job $j" || fail "job $j: the script did not requeue it"
done
for j in "$whole_job" "$batch2_job" "$kill1b_job" "$kill0b_job" "$limit_job"; do
  expect "$j" "$(field "$j" JobName)" COMPLETED 0:0
done
for j in "$term_job" "$limit_job" "$batch2_job" "$kill1b_job" "$kill0b_job"; do
  logged "$j" "^resuming" || fail "job $j did not resume (ga-run-$j.log)"
done
logged "$whole_job" "held-out" || fail "job $whole_job printed no report"

say "e: preemption: a job in partition urgent takes the whole node"
experiment preempt.yaml 300
preempt_job=$(submit preempt preempt.yaml)
wait_for 90 "generation 1 of job $preempt_job" gen1 "$preempt_job"
urgent_job=$(timeout 20 sbatch --parsable --partition=urgent --exclusive --output="$w/urgent-%j.log" \
  --wrap="sleep 3") || fail "sbatch of the urgent job failed"
wait_for 60 "requeue of job $preempt_job by preemption" restarted "$preempt_job"
logged "$preempt_job" "(exit 75)" || fail "job $preempt_job: no stop by SIGTERM in its log"
experiment preempt.yaml 60
expect "$urgent_job" "e: the urgent job" COMPLETED 0:0
expect "$preempt_job" "e: preempted, requeued, resumed" COMPLETED 0:0
logged "$preempt_job" "^resuming" || fail "job $preempt_job did not resume (ga-run-$preempt_job.log)"

wait "$srun_pid" || fail "a: srun -n 3 failed (srun.log)"
grep -q "2 evaluator ranks" srun.log || fail "a: srun -n 3 did not run 1 driver + 2 evaluators (srun.log)"
say "a: srun -n 3: $(grep -m1 'driver rank 0' srun.log)"

for name in srun whole term batch kill1 kill0 limit preempt; do same_rows "$name"; done
say "rows of every search equal the plain run's ($(wc -l < plain.rows) rows)"
passed=1
say "passed"
