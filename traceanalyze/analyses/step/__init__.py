"""The step model: one definition of what a step is, where its time went and what bounds it.

Every command that states a per-step figure or a bound reads it from here (docs/architecture.md,
"The step model"; the figures' definitions: docs/time.md):

* :mod:`.window`: the step window (the step's span on the CPU and on the GPU, windows of a rank
  never overlapping) and the GPU's busy intervals clipped to it, whatever their launch time;
* :mod:`.split`: the window's time split into compute, exposed communication, exposed copies
  and idle, with the part of the busy time carried in from work launched before the step;
* :mod:`.gaps`: each idle gap of a window and its cause, decided by causality (was the work
  that ends it already queued, or what did the launching thread do until it launched it);
* :mod:`.syncs`: the blocking calls (synchronisations and blocking copies), each priced;
* :mod:`.verdict`: the bound verdict, its margin and its evidence, from the split;
* :mod:`.model`: the model of a trace's counted steps, which the commands read.

This package's ``__init__`` imports nothing: the accounting below the commands imports
:mod:`.window` and :mod:`.split`, and :mod:`.model` sits above the iterations module.
"""
