"""Definitions of table columns that no analysis' DEFINITIONS dict holds (issue 41: every figure
a command prints is defined in docs/). Written once here; docs/formats.md prints each sentence
(tests/test_readme.py checks it does) and tests/test_definitions.py checks that every figure
column of every declared table is defined in docs/, here or by the analysis that computes it.

``COLUMN_DEFINITIONS``: one sentence per column name (the same name means the same figure in
every table that has it). ``DERIVED``: the names built from a defined figure ``X`` (``base_X``,
``X_delta``, ``X_step_min``, a per-step table's ``X`` for ``X_per_iter``), each with the one
sentence that defines all of them.
"""

from __future__ import annotations

COLUMN_DEFINITIONS: dict[str, str] = {
    # compare
    "speedup_low": "the GPU-busy speed-up with the baseline's fastest counted step against the "
    "variant's slowest (the least favourable pair); null below 3 counted steps in either trace",
    "speedup_high": "the GPU-busy speed-up with the baseline's slowest counted step against the "
    "variant's fastest (the most favourable pair); null below 3 counted steps in either trace",
    "speedup_wall_low": "`speedup_wall`'s least favourable value from the steps' wall times, as "
    "`speedup_low` is `speedup`'s; null where the speed-up comes from capture medians",
    "speedup_wall_high": "`speedup_wall`'s most favourable value from the steps' wall times, as "
    "`speedup_high` is `speedup`'s; null where the speed-up comes from capture medians",
    "steady_median_ms": "a cold capture's median time per call without its first (one-off) call, "
    "from the manifest; null for a warm capture",
    "steps_counted": "the counted steps the variant's figures are means over",
    "relative_error": "the variant's largest relative error against the float64 reference, from "
    "the capture's manifest",
    # cudnn
    "calls_total": "calls of the op in the whole trace, inside the iterations or not",
    "self_us_per_iter": "CPU self time of the op (its time less its child ops') per iteration, "
    "over the calls inside the counted iterations",
    "self_us_mean": "CPU self time of the op per call, mean over the calls inside the counted "
    "iterations",
    "self_us_first_in_trace": "CPU self time of the op's first call in the trace (where a plan "
    "is built, if the trace starts before it)",
    "self_us_steady_median": "median CPU self time of the op's calls after its first",
    "share_of_cpu_op_pct": "`self_us_per_iter` as a share of `cpu_op_us_per_iter`",
    # waves (roofline --table waves and the roofline rows)
    "grid_blocks": "the thread blocks of the kernel's grid (grid x * y * z)",
    "active_blocks_per_sm": "blocks of the kernel one SM runs at once (the occupancy model's "
    "limit from registers, shared memory, threads and blocks per SM)",
    "blocks_per_wave": "blocks the GPU runs at once: SMs x `active_blocks_per_sm`",
    "waves": "`grid_blocks` / `blocks_per_wave`: how many times the GPU is filled",
    "last_wave_fill_pct": "how full the last wave is: the fractional part of `waves` (100 when "
    "`waves` is whole)",
    "wave_efficiency_pct": "waves / ceil(waves) x 100: the share of the launched wave slots that "
    "run blocks, if every block takes equally long",
    "wave_loss_pct": "100 - `wave_efficiency_pct`: SM time the tail wave leaves idle",
    # launches
    "launch_cpu_us_median": "median duration on the CPU of the launch calls",
    "launch_cpu_us_p90": "90th percentile (linear interpolation) of the launch calls' duration",
    "launch_cpu_us_max": "longest launch call",
    "launch_delay_us_median": "median of an activity's start minus its launch call's start",
    "launch_delay_us_p90": "90th percentile of the launch delay (start minus launch call start)",
    "launch_delay_us_max": "longest launch delay (start minus launch call start)",
    "queue_median": "median of the activities on the same stream launched before it and not yet "
    "started when its launch call began (the work the GPU had in hand)",
    "queue_max": "the largest such queue (activities launched before and not yet started)",
    "gpu_us_median": "median duration on the GPU of the activities",
    "short_kernels_per_iter": "kernels per iteration that run for less time than their own "
    "launch call takes on the CPU (graph launches left out)",
    # idle
    "gaps_per_iter": "idle gaps of this cause per iteration",
    "share_of_idle_pct": "this cause's idle time as a share of all the steps' idle time",
    "gap_us": "the gap's length: no stream runs anything for this long",
    "starts_at_us": "where the gap starts, from its step's start",
    # kernels and occupancy
    "min_us": "shortest call of the kernel",
    "max_us": "longest call of the kernel",
    "mean_us": "mean duration per call",
    "total_us": "duration summed over the whole trace, inside the iterations or not",
    "count_per_iter": "calls per iteration, over the counted iterations",
    "us_per_iter": "duration per iteration, summed over the calls inside the counted iterations",
    "registers_per_thread": "registers each thread of the kernel uses, as the trace records",
    "shared_memory_bytes": "shared memory per block, static and dynamic, as the trace records",
    "threads_per_block": "threads in one block of the kernel (block x * y * z)",
    "streams": "the streams the kernel ran on",
    # memcpy
    "bytes_per_call": "bytes one copy moves, mean over the calls",
    "bytes_per_iter": "bytes the copies move per iteration",
    "bandwidth_gbps": "bytes moved / time taken, over the row's copies, in GB/s (10^9 bytes per "
    "second)",
    # info
    "span_ms": "the trace's span, first event start to last event end",
    "events": "events the trace holds",
    "gpu_linked": "GPU activities whose launch call (runtime or driver, same correlation id) is "
    "in the trace",
    "gpu_unlinked": "GPU activities with no launch call in the trace",
    "runtime_calls": "CUDA/HIP runtime and driver calls",
    "cpu_ops": "CPU operators (cpu_op events)",
    "ranks": "ranks (processes of one job) the trace or folder holds",
    # summary
    "gpu_activities_outside_iterations_total": "GPU activities whose launch call lies outside "
    "every iteration (left out of every per-iteration figure)",
    "gpu_activities_without_launch_total": "GPU activities with no launch call in the trace: no "
    "iteration can be given (left out of every per-iteration figure)",
    "cpu_ops_outside_iterations_total": "CPU operators outside every iteration",
    "launches_per_iter": "launch calls of this API per iteration",
    # sql's raw fields (as Kineto records them)
    "pid": "the process id the event was recorded in",
    "tid": "the thread id (for a GPU activity, Kineto's stream row)",
    "ts_ns": "start on the trace's clock, in nanoseconds",
    "dur_ns": "duration in nanoseconds",
    "dur_us": "duration in microseconds",
    "correlation": "the id that ties a GPU activity to its launch call",
    "external_id": "the id that ties a launch call to its CPU operator",
    "op_id": "the row of the CPU event (its launching op, for a GPU activity)",
    "parent_id": "the op_id of the enclosing CPU event on the same thread",
    "depth": "nesting depth among the thread's CPU events (0: outermost)",
    "launch_ts_ns": "start of the activity's launch call",
    "launch_dur_ns": "duration of the activity's launch call",
    "launch_tid": "thread of the activity's launch call",
    "grid_x": "the grid's blocks in x, as the trace records",
    "grid_y": "the grid's blocks in y, as the trace records",
    "grid_z": "the grid's blocks in z, as the trace records",
    "block_x": "threads of one block in x, as the trace records",
    "block_y": "threads of one block in y, as the trace records",
    "block_z": "threads of one block in z, as the trace records",
    "shared_memory": "shared memory per block in bytes, static and dynamic, as the trace records",
    "blocks_per_sm": "CUPTI's grid blocks / SMs: a load figure, not occupancy",
    "warps_per_sm": "CUPTI's warps of the grid per SM, as the trace records",
    "est_achieved_occupancy_pct": "CUPTI's estimate of achieved occupancy, as the trace records "
    "(an estimate, not a measurement)",
    "comm_group_size": "ranks in the collective's group, from the NCCL kernel's args",
    "comm_in_nelems": "elements of the collective's input message, from its args",
    "comm_out_nelems": "elements of the collective's output message, from its args",
    "addr": "the address of the allocated or freed block",
    "device_type": "the device kind of a memory event as Kineto numbers it (0: CPU, 1: CUDA)",
    "total_allocated_bytes": "bytes allocated on the device after the event, as the trace records",
    "total_reserved_bytes": "bytes the caching allocator holds after the event, as the trace "
    "records",
    "kernels": "kernels (GPU activities of kind kernel)",
    "memcpy": "memory copies (GPU activities of kind memcpy)",
    "memset": "memory sets (GPU activities of kind memset)",
    "memcpy_per_iter": "memory copies per iteration",
    "memset_per_iter": "memory sets per iteration",
    "gpu_memcpy_us_per_iter": "GPU time of memory copies per iteration",
    "gpu_memset_us_per_iter": "GPU time of memory sets per iteration",
    "transpose_ops_per_iter": "CPU-side transpose/permute views per iteration, each counted "
    "once (aten::t runs aten::transpose inside itself)",
    "graph_launches_per_iter": "CUDA/HIP graph launch calls per iteration (each replays a whole "
    "graph)",
    "cudnn_cpu_us_per_iter": "CPU self time of the ops that call into cuDNN, per iteration",
}

# Names built from a defined figure X: (how the name is built, its sentence).
DERIVED: dict[str, str] = {
    "base_X": "X of the baseline (the first trace of `diff`/`explain`)",
    "new_X": "X of the other trace",
    "X_delta": "X of the other trace minus X of the baseline",
    "X_step_min": "the smallest value of X over the counted steps (X_step_max: the largest)",
    "X (per-step tables)": "in a table of one row per step (`iterations`, `streams --by "
    "iteration`, `critical-path --table iterations`, `sql`'s iterations), the figure "
    "X_per_iter for that one step",
}
