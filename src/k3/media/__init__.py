"""Images in, model inputs out: decoding with Pillow under limits, K3's resize rule, normalisation and
patch order (vision spec §3), and the prompt block each image takes in the chat format (7).

`prepare_image(source)` -> PreparedImage (pixel_values [h*w, 3, 14, 14], grid (1, h, w), the upload's
size, the number of image tokens, a digest of the pixels); `stack_images` joins several for
`model.encode_images`.
"""

from k3.media.errors import ImageError
from k3.media.image import ImageLimits, PreparedImage, prepare_image, stack_images
from k3.media.prompt import image_block
from k3.media.resize import ResizePlan, plan_resize

__all__ = ["ImageError", "ImageLimits", "PreparedImage", "ResizePlan", "image_block", "plan_resize", "prepare_image",
           "stack_images"]
