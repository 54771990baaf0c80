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
    "streams": "how many distinct streams the kernel's calls ran on (a count; `stream` names "
    "the one most of them ran on)",
    # memcpy
    "bytes_per_call": "bytes one copy moves, mean over the calls",
    "bytes_per_iter": "bytes the copies move per iteration",
    "bandwidth_gbps": "bytes moved / time taken, over the row's copies, in GB/s (10^9 bytes per "
    "second)",
    # info
    "span_ms": "first start to last end of the recorded work: CPU operators, `record_function` "
    "annotations, runtime and driver calls, and GPU kernels, copies and sets, all ranks "
    "together. The profiler's own envelope (its `Trace` event), instant events (such as "
    "`Record Window End`), GPU-side annotations and Python frames are left out, so it can be "
    "shorter than the recording window a timeline viewer shows",
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
    "idle_us_by_cause": "`gpu_idle_us_per_iter` split by cause (the causes `idle --table "
    "causes` defines: queued, sync, data_loading, host, launch, launch_first_call), µs per "
    "iteration; the causes add up to `gpu_idle_us_per_iter`",
    "category_us": "GPU activity time per iteration in each category (the kernel categories, "
    "`memcpy` and `memset`); adds up to `gpu_activity_us_per_iter`",
    "category_count": "GPU activities per iteration in each category (the kernel categories, "
    "`memcpy` and `memset`), a mean over the counted iterations (a whole number prints as one); "
    "adds up to `kernels_per_iter` + `memcpy_per_iter` + `memset_per_iter`",
    "launch_apis": "launch calls per iteration of each runtime or driver API that launched GPU "
    "activities (one `cudaGraphLaunch` starts a whole graph's activities), a mean over the "
    "counted iterations",
    # info
    "event_counts": "events of the trace file per `cat` field (`cpu_op`, `kernel`, "
    "`cuda_runtime`, `ac2g` flow arrows, `Trace` the profiler's envelope, ...; `(none)`: events "
    "with no `cat`, such as metadata); adds up to `events`",
    # explain's base_figures / new_figures: the own-work figures of the step model
    "gpu_own_busy_us_per_iter": "the mean of the step table's `own_busy_us` over the counted "
    "steps: time at least one GPU activity the step launched runs, wherever it falls",
    "gpu_own_idle_us_per_iter": "`gpu_span_us_per_iter` minus `gpu_own_busy_us_per_iter`: the "
    "gaps inside the span of the work the step launched. Not `gpu_idle_us_per_iter`, which is "
    "the step's window (`wall_us_per_iter`, which can be longer than that span) minus the time "
    "anything runs in it: `explain` follows the work each step launched, `summary` the window",
    "overlap_us_per_iter": "`gpu_activity_us_per_iter` minus `gpu_own_busy_us_per_iter`: time "
    "two or more of the step's activities run at once on different streams, counted once "
    "more for each extra one",
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
    "cublas_cpu_us_per_iter": "CPU self time of the ATen ops that call cuBLAS or cuBLASLt "
    "themselves (hipBLAS on ROCm: `aten::mm`, `addmm`, `bmm`, `baddbmm`, `mv`, `_scaled_mm`, "
    "...), per iteration: ATen's dispatch and checks plus the library's host-side work; their "
    "launch calls, children of the op, are not counted (`explain`'s `cpu` table)",
    # identifiers and counts shared by many tables (one name, one meaning in all of them)
    "kernels_per_iter": "kernels (GPU activities of kind kernel; copies and sets not counted) "
    "launched inside the counted iterations, per iteration (a mean over them): all of the "
    "step's (`summary`, `compare`), the stream's (`streams`), those launched from the frame "
    "(`stacks`, whose rows add up to the summary's)",
    "count": "how many events the row stands for in the whole trace, inside the iterations or "
    "not: the calls of the kernel name (`kernels`), the row's copies or sets (`memcpy`), the "
    "collective calls (`comms --by kind`), the cache events in the call (`cold --table cache`), "
    "the events the finding holds (`audit`); a table that counts only inside the iterations "
    "says so, `count_in_iterations`",
    "count_in_iterations": "how many of the row's events lie inside the counted iterations "
    "(`count_per_iter` times the iterations): the launches of the name or category "
    "(`launches`), the calls of the op and shapes (`roofline`)",
    "device": "the device's index as the trace records it: a GPU activity's `device` (0, 1, "
    "...: `streams`, `idle`, `sql`'s `gpu` and `kernels`); in `sql`'s `memory`, the memory "
    "event's `Device Id` (-1 for host memory; "
    "`device_type` gives the kind). `memory`'s tables name the device as `device_label`",
    "bytes": "the size in bytes of what the row's event moves or holds: a copy's or set's bytes "
    "as the trace records them (`sql`'s `gpu` and `kernels`: null for a kernel); an "
    "allocation's bytes, negative for a free (`sql`'s `memory`); a collective's message as "
    "nccl-tests counts it, the larger of `In msg nelems` and `Out msg nelems` times the element "
    "size of `dtype`: an all-gather's output, a reduce-scatter's input (`comms`); one call's "
    "memory traffic as the roofline models it, each input read once and each output written "
    "once, so a lower bound (`roofline`)",
    "rank": "the rank (process of a distributed job) of the row: the `distributedInfo` rank its "
    "trace states, 0 for a trace that states none",
    "stream": "the CUDA/HIP stream id the activity ran on, as the trace records it (`kernels`: "
    "the stream most of the name's calls ran on, the lowest on a tie)",
    "iterations": "iterations (steps) the figures are over: the counted ones (`summary`, `idle`, "
    "`ranks` per rank); every one found (`info`); the counted ones in which the stream ran "
    "something (`streams`)",
    "thread": "the CPU thread id (`tid`) the path runs on",
    # iterations (per step); `idle` defines each cause
    "own_busy_us": "time at least one GPU activity the step launched runs, wherever it falls: "
    "the union of their intervals per device, summed over the devices",
    "carried_in_warmup_us": "the part of `carried_in_us` launched before the rank's first step "
    "or with no launch recorded (profiler warm-up steps, work before the profiler started); a "
    "step holding much of it is a `warm-up` step",
    **{
        f"idle_{cause}_us": f"the step's idle time of the cause `{cause}` (`idle`)"
        # The step model's causes (analyses/step/gaps.py); a new one is a new column, which
        # tests/test_definitions.py then asks to define.
        for cause in ("queued", "sync", "data_loading", "host", "launch", "launch_first_call")
    },
    "idle_queued_dispatch_us": "the part of `idle_queued_us` in gaps shorter than 10 µs: the "
    "GPU's own dispatch between queued kernels (the verdict counts it on the GPU side)",
    "idle_queued_waiting_us": "the part of `idle_queued_us` in gaps of 10 µs or more: queued "
    "work waiting on a dependency (another stream's work, an event)",
    # streams (per stream, and per step with --by iteration)
    "activity_us_per_iter": "durations of the stream's kernels, copies and sets launched in the "
    "iteration, summed, per iteration (an iteration where it ran nothing counts as 0)",
    "kernel_us_per_iter": "the kernels' part of the stream's `activity_us_per_iter`",
    "busy_us_per_iter": "time at least one of the stream's activities runs (the union of their "
    "intervals), per iteration",
    "idle_us_per_iter": "the stream's span (first start to last end of its activities in the "
    "iteration) minus its busy time, per iteration; a gap another stream fills counts, so "
    "streams' idle times do not add up to `gpu_idle_us_per_iter`",
    # idle
    "gpu_activities_per_iter": "GPU activities launched inside the counted iterations, per "
    "iteration (0: no GPU timeline, so no idle time)",
    "cpu_blocked_us_per_iter": "duration of the row's blocking calls (the CPU time they "
    "blocked), per iteration; blocking as the `sync` idle cause defines it: a synchronize, a "
    "synchronous copy or set, or an async copy call with a pageable side that waited for its "
    "copy (a device-to-device or pinned copy never blocks)",
    "gpu_waited_us_per_iter": "time the rank's GPU was busy while the row's blocking calls "
    "waited, per iteration (the rest of the blocked time the GPU idled)",
    # launches
    "name_median_delay_us": "median `launch_delay_us` of every launch of the same kernel name "
    "inside the iterations; an outlier's delay is over 3 times it and 10 µs or more above it",
    # roofline
    "flops": "floating-point operations of one call of the op, from its recorded shapes (the "
    "formulas of `traceanalyze/analyses/roofline/ops.py`)",
    "gpu_us": "GPU time of one call: the durations of the kernels, copies and sets it launched, "
    "summed (`roofline`: mean over the row's calls; `cold --table calls`: that call's)",
    "tbps": "`bytes` / `gpu_us`: the achieved memory throughput in TB/s (10^12 bytes per "
    "second), a lower bound as `bytes` is",
    "intensity": "`flops` / `bytes`: FLOPs per byte moved (arithmetic intensity)",
    "pct_of_roofline": "the call's time on the roofline, max(flops / peak FLOP/s, bytes / peak "
    "bandwidth) (bytes alone for an op without FLOPs), over `gpu_us`, x 100 (100: on the "
    "roofline); null without the GPU's peaks",
    "mean_kernel_us": "mean duration of the row's kernels (copies and sets left out); null "
    "without kernels",
    "gpu_sm": "the GPU's compute capability x 10 (90 for an H100), from the trace's "
    "deviceProperties",
    "kernel_sm": "the architecture (compute capability x 10) the name of the row's longest GEMM "
    "kernel says it was built for; null where it says none",
    "kernel_align_elements": "the smallest operand alignment, in elements, the name of the "
    "row's longest GEMM kernel states (`align8`); null where it states none",
    "modelled_pct": "the modelled rows' share of the iterations' GPU activity time "
    "(`gpu_activity_us_per_iter`)",
    "activities_per_iter": "GPU activities (kernels, copies, sets) of the row per iteration",
    "peak_tflops": "the GPU's dense compute peak the row is held to, in TFLOP/s: the one for "
    "`peak_dtype` (`peak_*_tflops`, or `roofline --peak-tflops`); null where the GPU or the "
    "dtype has none, and for memory ops",
    "peak_tbps": "the GPU's peak device-memory bandwidth in TB/s (10^12 bytes per second): the "
    "datasheet's (`traceanalyze/hardware/peaks.py`), or `roofline --peak-tbps`",
    **{
        f"peak_{dtype}_tflops": f"the GPU's dense {path} peak in TFLOP/s (the datasheet's in "
        "`traceanalyze/hardware/peaks.py`, without sparsity, at boost clock; `peak_source` says "
        "where a flag replaced it); null where the GPU has none"
        for dtype, path in (
            ("bf16", "bf16 tensor-core (AMD: matrix-core)"),
            ("fp16", "fp16 tensor-core (AMD: matrix-core)"),
            ("fp8", "fp8 tensor-core (AMD: matrix-core)"),
            ("tf32", "TF32 tensor-core (fp32 inputs with TF32 allowed; AMD: xf32)"),
            ("fp32", "fp32 (NVIDIA: the CUDA cores, no TF32; AMD: the FP32 matrix)"),
            ("fp64", "plain FP64 (NVIDIA: the CUDA cores; AMD: vector)"),
            ("fp64_tensor", "FP64 tensor-core (NVIDIA DMMA, sm80+; AMD: matrix-core)"),
        )
    },
    # comms
    "bytes_median": "median `bytes` over the row's calls (inside the iterations or not)",
    "busbw_gbps_median": "median `busbw_gbps` over the row's calls",
    "link_peak_gbps": "the GPU's intra-node link peak in one direction, in GB/s, what busbw "
    "approaches within a node (the table in `traceanalyze/analyses/distributed/comms_rules.py`); "
    "null for a GPU it lacks",
    "busbw_pct_of_peak": "`busbw_gbps_median` / `link_peak_gbps` x 100",
    # ranks
    "median_wall_us_per_iter": "the median over the ranks of their `wall_us_per_iter`",
    "straggler_pct": "the straggler threshold (`--straggler-pct`): a rank whose "
    "`wall_pct_over_median` exceeds it is a straggler",
    "collectives_matched": "collectives run on two or more ranks and matched across them (the "
    "rows of `ranks --table collectives`)",
    "median_start_spread_us": "the median `start_spread_us` over the matched collectives",
    "max_start_spread_us": "the largest `start_spread_us` over the matched collectives",
    "occurrence": "which launch of the kernel name in the iteration the collective is, on each "
    "rank: 0 the first, 1 the second, ...",
    "first_rank": "the rank that started the collective first, on aligned clocks (ties: the "
    "lowest); null where all started together",
    "last_rank": "the rank that started the collective last, on aligned clocks (ties: the "
    "lowest); null where all started together",
    # audit
    "error_bar_per_iter": "the figure's error bar (`error_bars`), in the figure's unit per "
    "iteration",
    "offset_us": "the rank's clock minus the lowest rank's (`offsets_us`)",
    # check
    "measured": "the expectation's metric as the trace's summary gives it (null where the "
    "summary has no value)",
    # memory
    "block_bytes": "the size of one memory block, as its allocation event records",
    "allocated_in_iteration": "the iteration the block was allocated in (null: outside the "
    "counted iterations, as a rule before them)",
    "lifetime_us": "time from the block's allocation to its free; null where the block outlives "
    "the trace",
    "blocks_per_iter": "blocks of the op and size that outlive their iteration, per counted "
    "iteration",
    "device_growth_bytes_per_iter": "the device's allocated bytes at an iteration's end minus at "
    "its start, mean over the iterations",
    "largest_block_bytes": "the largest block allocated: by the op in that iteration on that "
    "device (`memory --table top_ops`); by any op on a GPU inside the iterations (`compare`)",
    "peak_increase_bytes_per_iter": "the median over the counted iterations of the GPU's "
    "`peak_increase_bytes` (the highest GPU's in each, for several); null without GPU memory "
    "events",
    # diff and explain
    "base": "the row's figure (`figure`) in the baseline, in its unit",
    "new": "the row's figure in the other trace",
    "delta": "`new` - `base`",
    "change": "`new` - `base`, in the figure's unit",
    "change_pct": "`change` / `base` x 100; null where `base` is 0",
    "change_us": "GPU time per iteration of the other trace minus the baseline's (`new_us` - "
    "`base_us`; `new_us_per_iter` - `base_us_per_iter` per kernel)",
    "total_us_per_iter_delta": "the change in GPU span per iteration (`gpu_span_us_per_iter`): "
    "the sum of the parts' changes",
    "total_us_per_iter_delta_low": "the change in span with the other trace's shortest step "
    "against the baseline's longest; null under 3 counted steps in either",
    "total_us_per_iter_delta_high": "the change in span with the other trace's longest step "
    "against the baseline's shortest; null under 3 counted steps in either",
    "busy_us_per_iter_delta": "the change in `own_busy_us` per iteration (mean over the counted "
    "steps)",
    "base_per_iter": "blocks of the op and size live at the GPU's peak per counted iteration, in "
    "the baseline",
    "new_per_iter": "the same in the other trace",
    # graphs
    "graph": "the CUDA graph, numbered 1, 2, ... per rank in order of first replay",
    "position": "the activity's place in one replay of the graph, from 0 (graph node id order "
    "where recorded, else start order)",
    "replays_per_iter": "replays that ran the activity, per iteration",
    # cold
    "call": "the call's number on its rank, 1, 2, ... in time order (call 1: the first call)",
    "steady_call": "the median steady call the first call is compared with (its `call`)",
    "steady_calls": "the steady calls (later calls of the same shapes) the median is taken over",
    "calls": "the calls found in the trace on call 1's rank",
    "shape_index": "the call's input shapes, numbered 1, 2, ... in order of first appearance",
    "share_of_excess_pct": "the row's `excess_us` as a share of its call and side's total "
    "excess; null where that total is not positive",
    "cpu_us": "the call's span on the CPU",
    "wall_us": "the call's wall time: the longer of its CPU span and the span of the GPU work it "
    "launched",
    "cpu_excess_us": "`excess_us` of the breakdown's side `cpu`, summed",
    "gpu_excess_us": "`excess_us` of the breakdown's side `gpu`, summed; null without GPU work",
    "timed_steady_us": "the timed steady call (see `timed_first_call_us`)",
    "timed_excess_us": "`timed_first_call_us` - `timed_steady_us`",
    "one_off_difference_us": "the variant's `excess_us` minus the baseline's, from "
    "`advantage_source` (see `advantage_us`)",
    # critical-path
    "slack_us_per_iter": "how much an iteration would shrink if the item took no time: a "
    "first-order estimate (`critical-path`'s `items` says how it is made)",
}

# Names built from a defined figure X: (how the name is built, its sentence).
DERIVED: dict[str, str] = {
    "base_X": "X of the baseline (the first trace of `diff`/`explain`)",
    "new_X": "X of the other trace",
    "X_delta": "X of the other trace minus X of the baseline",
    "X_step_min": "the smallest value of X over the counted steps, where X is a figure or the "
    "step's value of X_per_iter (X_step_max: the largest)",
    "X (per-step tables)": "in a table of one row per step (`iterations`, `streams --by "
    "iteration`, `critical-path --table iterations`, `sql`'s iterations), the figure "
    "X_per_iter for that one step",
}
