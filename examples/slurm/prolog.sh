#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/*): records the job on
# each of its GPUs in the job mapping directory the gpuviz receiver reads
# (slurm.job_mapping_dir), in dcgm-exporter's --hpc-job-mapping-dir format:
# one file per GPU index, one job id a line. docs/slurm.md.
#
# slurmd runs it as root with SLURM_JOB_ID and SLURM_JOB_GPUS (the job's GPU
# indexes on this node, "0,1") set. It always exits 0: a failing Prolog
# drains the node.
dir=${GPUVIZ_SLURM_JOB_DIR:-/run/gpuviz/slurm-jobs}
job=$SLURM_JOB_ID
case $job in '' | *[!0-9]*) exit 0 ;; esac
[ -n "$SLURM_JOB_GPUS" ] || exit 0
mkdir -p "$dir" 2>/dev/null && chmod 0755 "$dir" 2>/dev/null

add() { # add the job to GPU $1's file, replacing the file whole
	f="$dir/$1"
	tmp="$dir/.$1.$job.$$"
	{
		[ -f "$f" ] && grep -vx "$job" "$f"
		echo "$job"
	} >"$tmp" 2>/dev/null && chmod 0644 "$tmp" && mv -f "$tmp" "$f"
	rm -f "$tmp"
}

for gpu in $(echo "$SLURM_JOB_GPUS" | tr ',' ' '); do
	case $gpu in '' | *[!0-9]*) continue ;; esac
	if command -v flock >/dev/null 2>&1; then
		(flock -w 10 9 && add "$gpu") 9>>"$dir/.lock"
	else
		add "$gpu"
	fi
done 2>/dev/null
exit 0
