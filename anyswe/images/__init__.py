"""Images: local docker builds and SIF conversion, cached by content; nothing is pulled."""

from anyswe.images.build import build_docker_image, ensure_sif, image_id

__all__ = ["build_docker_image", "ensure_sif", "image_id"]
