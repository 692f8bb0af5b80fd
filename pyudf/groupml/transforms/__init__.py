"""Raw columns in: the transform fitted on a run's feature columns and stored with its models.

Public API: :class:`Transform` (fit, transform, to_json/from_json), :func:`apply`,
:func:`kind_of_type`, :func:`check_spec`; :mod:`groupml.transforms.sql` builds the SQL that
computes a transform's statistics and encodes rows in the training query.
"""

from ._transform import (DEFAULT_MAX_CATEGORIES, KINDS, SUPPORTED_TYPES, Transform, apply, check_spec, kind_of_type,
                         part_names, scales_for, unsupported)

__all__ = ["DEFAULT_MAX_CATEGORIES", "KINDS", "SUPPORTED_TYPES", "Transform", "apply", "check_spec", "kind_of_type",
           "part_names", "scales_for", "unsupported"]
