-- Schema version 9: who holds a lease, so that a dead holder on this host is
-- recognised at once even where a pid alone cannot tell: a run killed in a
-- container (its pid, often 1, means another process out here), a killed
-- process not yet reaped (a zombie) and a pid the kernel gave to a new
-- process. A lease names its holder by pid plus
--   pid_start_ticks: the process's start time (/proc/PID/stat field 22,
--                    clock ticks since boot): another process under the same
--                    pid starts at another tick;
--   boot_id:         /proc/sys/kernel/random/boot_id: another value on the
--                    same host means the machine rebooted since;
--   pid_namespace:   readlink /proc/self/ns/pid ("pid:[4026531836]"): the
--                    namespace the pid counts in.
-- NULL in leases written before version 9: those are judged by pid and
-- heartbeat as before.
ALTER TABLE experiment_leases ADD COLUMN pid_start_ticks INTEGER;
ALTER TABLE experiment_leases ADD COLUMN boot_id TEXT;
ALTER TABLE experiment_leases ADD COLUMN pid_namespace TEXT;
