"""The cpu kernel family's templates: register blocks shaped for CPU cores."""
