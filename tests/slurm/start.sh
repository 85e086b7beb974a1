#!/usr/bin/env bash
# A one-node Slurm cluster on this host, for the tests that run pipeline shards as real Slurm jobs
# (tests/integration/test_pipeline_slurm.py; docs/guides/scale-out.md, "What is tested").
#
# Installs Debian's slurm-wlm and munge if they are missing (root and apt-get needed), writes
# /etc/slurm/slurm.conf with this host as the controller and its only node (one partition, "gen"),
# starts munged as the munge user, then slurmctld and slurmd, and waits until `sinfo` shows the
# node idle. Idempotent: a cluster already up is left as it is. Prints one line and exits non-zero
# when it cannot (not root, no apt-get, a daemon that does not come up), naming the log to read.
# Only local daemons on this host: slurmctld and slurmd talk to each other on loopback ports.
set -euo pipefail

LOG=${SLURM_START_LOG:-/tmp/gen-slurm-start.log}
PARTITION=gen

say() { echo "slurm: $*" >&2; }

if command -v sinfo >/dev/null 2>&1 && sinfo -h -p "$PARTITION" -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
  exit 0  # already up
fi
if [ "$(id -u)" != 0 ]; then
  say "needs root to install and start a one-node cluster"; exit 3
fi
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { say "slurm-wlm and munge are not installed and there is no apt-get"; exit 3; }
  {
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge
  } >>"$LOG" 2>&1 || { say "apt-get install slurm-wlm munge failed (see $LOG)"; exit 3; }
fi

host=$(hostname -s)
# What slurmd sees of this node (CPUs, sockets, memory), less 1 GB of memory for the system.
node=$(slurmd -C | head -n 1)
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
node=${node/RealMemory=$mem/RealMemory=$((mem > 2048 ? mem - 1024 : mem))}

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
# CR_CPU: CPUs are what a job holds; memory is checked against the node but not held, so two
# shards of a small step run side by side on a 2-CPU machine.
cat >/etc/slurm/slurm.conf <<CONF
# Written by gen's tests/slurm/start.sh: a one-node cluster on this host.
ClusterName=gen
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

# munge: its key (Debian's package makes one; make it if missing), its daemon as its own user
if [ ! -s /etc/munge/munge.key ]; then
  (command -v mungekey >/dev/null && mungekey --create --keyfile=/etc/munge/munge.key) \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null >/dev/null 2>&1; then
  su -s /bin/sh munge -c "munged --force" >>"$LOG" 2>&1 || { say "munged did not start (see $LOG)"; exit 4; }
fi

pkill -x slurmctld 2>/dev/null || true
pkill -x slurmd 2>/dev/null || true
sleep 1
slurmctld -c >>"$LOG" 2>&1 || { say "slurmctld did not start (see /var/log/slurm/slurmctld.log)"; exit 4; }
slurmd >>"$LOG" 2>&1 || { say "slurmd did not start (see /var/log/slurm/slurmd.log)"; exit 4; }

for _ in $(seq 1 60); do
  state=$(sinfo -h -p "$PARTITION" -o %t 2>/dev/null || true)
  case "$state" in
    idle*|mix*|alloc*) exit 0 ;;
    down*|drain*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
say "the node did not become idle in 60 s (sinfo: ${state:-nothing}; see /var/log/slurm/)"
exit 4
