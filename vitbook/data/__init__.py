"""The data: images that ship offline, CIFAR-10 and its stand-in, and augmentation on the device.

- :mod:`vitbook.data.samples`: photos bundled with matplotlib and scikit-learn; the 8x8 digits.
- :mod:`vitbook.data.cifar_sample`: 6,000 real CIFAR-10 photos that ship with the package.
- :mod:`vitbook.data.cifar`: CIFAR-10 with a validation split, and an offline stand-in.
- :mod:`vitbook.data.folders`: your own photos, a subfolder per class.
- :mod:`vitbook.data.augment`: augmentation drawn per image on the device, built from
  :mod:`vitbook.data.image_ops`, :mod:`vitbook.data.randaugment` and :mod:`vitbook.data.mixing`.

See chapter: Images as sequences of patches.
"""

from vitbook.data.cifar_sample import cifar10_sample_splits, load_cifar10_sample
from vitbook.data.folders import load_image_folder, write_image_folder
from vitbook.data.samples import SAMPLE_IMAGES, load_digits_split, sample_image

__all__ = [
    "SAMPLE_IMAGES",
    "cifar10_sample_splits",
    "load_cifar10_sample",
    "load_digits_split",
    "load_image_folder",
    "sample_image",
    "write_image_folder",
]
