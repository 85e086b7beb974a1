#!/usr/bin/env bash
# A one-node Slurm cluster on this host, for the tests that run pipeline shards as real Slurm jobs
# (tests/integration/test_pipeline_slurm.py; docs/guides/scale-out.md, "What is tested").
#
# Installs Debian's slurm-wlm, slurmdbd, munge and mariadb-server if they are missing (root and
# apt-get needed), writes /etc/slurm/slurm.conf with this host as the controller and its only node
# (one partition, "gen") and slurmdbd.conf, starts munged as the munge user, MariaDB, slurmdbd,
# slurmctld and slurmd, and waits until `sinfo` shows the node idle. Accounting (slurmdbd on
# MariaDB) is there because submitit learns a job's end from `sacct`, as on a real cluster: without
# it a failed or cancelled job is never seen to end. Idempotent: a cluster already up is left as it is. Prints one line and exits non-zero
# when it cannot (not root, no apt-get, a daemon that does not come up), naming the log to read.
# Only local daemons on this host: slurmctld and slurmd talk to each other on loopback ports.
set -euo pipefail

LOG=${SLURM_START_LOG:-/tmp/gen-slurm-start.log}
PARTITION=gen

say() { echo "slurm: $*" >&2; }

if command -v sinfo >/dev/null 2>&1 && sinfo -h -p "$PARTITION" -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' \
   && sacct -n -X -S now >/dev/null 2>&1; then
  exit 0  # already up
fi
if [ "$(id -u)" != 0 ]; then
  say "needs root to install and start a one-node cluster"; exit 3
fi
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
   || ! command -v slurmdbd >/dev/null 2>&1 || ! command -v mariadbd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { say "Slurm is not installed and there is no apt-get"; exit 3; }
  {
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      slurm-wlm slurmdbd munge mariadb-server
  } >>"$LOG" 2>&1 || { say "apt-get install slurm-wlm slurmdbd munge mariadb-server failed (see $LOG)"; exit 3; }
fi

host=$(hostname -s)
# What slurmd sees of this node (CPUs, sockets, memory), less 1 GB of memory for the system.
node=$(slurmd -C | head -n 1)
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
node=${node/RealMemory=$mem/RealMemory=$((mem > 2048 ? mem - 1024 : mem))}

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /run/mysqld
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
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
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

# accounting: MariaDB on its socket only (no TCP port), a database and user for slurmdbd
chown mysql:mysql /run/mysqld 2>/dev/null || true
if ! mariadb -e 'select 1' >/dev/null 2>&1; then
  [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >>"$LOG" 2>&1
  (mariadbd --user=mysql --skip-networking >>"$LOG" 2>&1 &)
  for _ in $(seq 1 30); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 1; done
  mariadb -e 'select 1' >/dev/null 2>&1 || { say "MariaDB did not start (see $LOG)"; exit 4; }
fi
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gen-test-only';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" >>"$LOG" 2>&1
cat >/etc/slurm/slurmdbd.conf <<CONF
# Written by gen's tests/slurm/start.sh: accounting for the one-node cluster (local socket only).
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=gen-test-only
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
chmod 0600 /etc/slurm/slurmdbd.conf

pkill -x slurmctld 2>/dev/null || true
pkill -x slurmd 2>/dev/null || true
pkill -x slurmdbd 2>/dev/null || true
sleep 1
slurmdbd >>"$LOG" 2>&1 || { say "slurmdbd did not start (see /var/log/slurm/slurmdbd.log)"; exit 4; }
for _ in $(seq 1 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -i add cluster gen >>"$LOG" 2>&1 || true  # already there on a second start
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
