"""Performance models as data: FLOP and byte formulas per CPU op (:mod:`.ops`), their columnar
arithmetic over recorded shapes (:mod:`.formulas`) and GPU peaks per device (:mod:`.peaks`)."""
