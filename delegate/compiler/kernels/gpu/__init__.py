"""The gpu kernel family's templates: work-groups sharing weights through local memory."""
