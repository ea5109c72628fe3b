"""Side area: host checks, the five-point pilot checklist and its report."""
