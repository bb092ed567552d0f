"""SQL on the warehouse: the named queries of `queries/` (`queries`), the check that a statement only
reads (`readonly`), running ad hoc SQL confined to the warehouse (`run`), and its output (`output`)."""
