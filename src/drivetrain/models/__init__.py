from drivetrain.models.base import Model, ModelRequest, ModelResponse

__all__ = ["Model", "ModelRequest", "ModelResponse"]
