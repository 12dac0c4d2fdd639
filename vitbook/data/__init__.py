"""The data: images that ship offline, CIFAR-10 and its stand-in, and augmentation on the device.

- :mod:`vitbook.data.samples`: photos bundled with matplotlib and scikit-learn, and the 8x8
  digits split into training, validation and test (``from vitbook.data import ...``).
- :mod:`vitbook.data.cifar`: CIFAR-10 with a validation split (torchvision or a ``.npz``), and
  an offline stand-in.
- :mod:`vitbook.data.augment`: augmentation drawn for every image on the device (crop and flip,
  RandAugment, MixUp and CutMix), built from :mod:`vitbook.data.image_ops`,
  :mod:`vitbook.data.randaugment` and :mod:`vitbook.data.mixing`.

See chapter: Images as sequences of patches.
"""

from vitbook.data.samples import SAMPLE_IMAGES, load_digits_split, sample_image

__all__ = ["SAMPLE_IMAGES", "load_digits_split", "sample_image"]
