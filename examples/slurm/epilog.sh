#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/*): removes the job
# from each of its GPUs' files in the job mapping directory, and a file with
# its last job; prolog.sh is its other half. docs/slurm.md.
#
# slurmd runs it as root with SLURM_JOB_ID and SLURM_JOB_GPUS set. It always
# exits 0: a failing Epilog drains the node.
dir=${GPUVIZ_SLURM_JOB_DIR:-/run/gpuviz/slurm-jobs}
job=$SLURM_JOB_ID
case $job in '' | *[!0-9]*) exit 0 ;; esac
[ -d "$dir" ] || exit 0

remove() { # remove the job from GPU $1's file, replacing the file whole
	f="$dir/$1"
	[ -f "$f" ] || return 0
	tmp="$dir/.$1.$job.$$"
	if grep -vx "$job" "$f" >"$tmp" 2>/dev/null && [ -s "$tmp" ]; then
		chmod 0644 "$tmp" && mv -f "$tmp" "$f"
	else
		rm -f "$f" # grep found no other job
	fi
	rm -f "$tmp"
}

# Every GPU the job held; without SLURM_JOB_GPUS, every file.
gpus=$(echo "$SLURM_JOB_GPUS" | tr ',' ' ')
[ -n "$gpus" ] || gpus=$(ls "$dir" 2>/dev/null)
for gpu in $gpus; do
	case $gpu in '' | *[!0-9.]*) continue ;; esac
	if command -v flock >/dev/null 2>&1; then
		(flock -w 10 9 && remove "$gpu") 9>>"$dir/.lock"
	else
		remove "$gpu"
	fi
done 2>/dev/null
exit 0
