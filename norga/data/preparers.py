"""The archives of each benchmark for ``norga data prepare``, with the checksums we ship and where they are
published (docs/backbones-and-data.md lists them too).

* torchvision datasets: the md5 values torchvision's own classes carry (torchvision 0.29,
  ``datasets/cifar.py``, ``mnist.py``, ``svhn.py``; ``tests/test_data_prepare.py`` compares them with the
  installed torchvision), the same URLs, extracted into the folders torchvision reads.
* ImageNet-R ``imagenet-r.tar``: md5 as published in torch-uncertainty (``ImageNetR.tgz_md5``); the
  dataset's authors publish none.
* CUB-200-2011 ``CUB_200_2011.tgz``: md5 as published with the Caltech archive and used by avalanche and
  TDeVries/cub2011_dataset (``tgz_md5``).
* notMNIST ``notMNIST.zip``: git's blob id of ``data/notMNIST.zip`` in facebookresearch/Adversarial-Continual-
  Learning (the file its raw URL serves), i.e. sha1 of ``"blob <size>\\0" + content``.
"""
from __future__ import annotations

from .check import check_cifar100, check_cub200, check_five_datasets, check_imagenet_r
from .content_readers import cifar_batch, check_problems, idx_file, label_names, letter_folders, listed_files, svhn_mat
from .contents import Needed
from .five_datasets import NOTMNIST_URL
from .folders import CUB_URL, IMAGENET_R_URL
from .prepare import Archive, Preparer, register_preparer

TORCHVISION = "torchvision's published md5"
MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
FASHION_MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
MNIST_MD5 = {"train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
             "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
             "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
             "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c"}
FASHION_MD5 = {"train-images-idx3-ubyte": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
               "train-labels-idx1-ubyte": "25c81989df183df01b3e8a0aad5dffbe",
               "t10k-images-idx3-ubyte": "bef4ecab320f06d8554ea6380940ec79",
               "t10k-labels-idx1-ubyte": "bb300cfdad3c16e7a12a480ee83cd310"}
SVHN_MD5 = {"train": "e26dedcc434d2e4c54c9b2d4a06d8373", "test": "eb5a983be6a315427106f1b164d9cef3"}
# md5 of the extracted CIFAR pickles, as torchvision's CIFAR10/CIFAR100 classes carry them
CIFAR100_FILES_MD5 = {"train": "16019d7e3df5f24257cddd939b257f8d", "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
                      "meta": "7973b15100ade9c7d40fb424638fde48"}
CIFAR10_FILES_MD5 = {"data_batch_1": "c99cafc152244af753f735de768cd75f",
                     "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
                     "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
                     "data_batch_4": "634d18415352ddfa80567beed471001a",
                     "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
                     "test_batch": "40351d587109b95175f43aff81a1287e",
                     "batches.meta": "5ff9c542aee3614f3951f8cda6e48888"}

CIFAR100 = Archive("cifar-100-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
                   "md5:eb9058c3a382ffc7106e4002c42a8d85", TORCHVISION, (("cifar-100-python", "cifar-100-python"),))
CIFAR10 = Archive("cifar-10-python.tar.gz", ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                  "md5:c58f30108f718f92721af3b95e74349a", TORCHVISION,
                  (("cifar-10-batches-py", "cifar-10-batches-py"),))
IMAGENET_R = Archive("imagenet-r.tar", (IMAGENET_R_URL,), "md5:a61312130a589d0ca1a8fca1f2bd3337",
                     "md5 published in torch-uncertainty (ImageNetR.tgz_md5); none by the dataset's authors",
                     (("imagenet-r", "imagenet-r"),))
CUB_RECORD_URL = "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz?download=1"  # most cited
CUB = Archive("CUB_200_2011.tgz", (CUB_RECORD_URL, CUB_URL), "md5:97eceeb196236b17998738112f37df78",
              "md5 of the Caltech archive, as published in avalanche and TDeVries/cub2011_dataset",
              (("CUB_200_2011", "CUB_200_2011"),))
NOTMNIST = Archive("notMNIST.zip", (NOTMNIST_URL,), "git-sha1:3e15e76aba58fdd8ea2fe95180192c104b62f0f2",
                   "git blob id of data/notMNIST.zip in facebookresearch/Adversarial-Continual-Learning",
                   (("notMNIST", "notMNIST"),))


def _idx_files(folder: str, mirrors, md5) -> tuple:
    """The 4 gzipped idx files of MNIST / Fashion-MNIST, decompressed into ``<folder>/raw/`` (torchvision)."""
    return tuple(Archive(f"{folder}/{name}.gz", tuple(f"{m}{name}.gz" for m in mirrors), f"md5:{digest}",
                         TORCHVISION, ((name, f"{folder}/raw/{name}"),)) for name, digest in md5.items())


SVHN = tuple(Archive(f"SVHN/{part}_32x32.mat", (f"http://ufldl.stanford.edu/housenumbers/{part}_32x32.mat",),
                     f"md5:{digest}", TORCHVISION, ((f"{part}_32x32.mat", f"SVHN/{part}_32x32.mat"),), "copy")
             for part, digest in SVHN_MD5.items())

def _imagenet_r_files() -> list:
    """The 30,000 files of CODA-Prompt's ImageNet-R split ('<wnid>/<file>')."""
    from .imagenet_r_splits import read_shipped

    train, test, _ = read_shipped()
    return sorted(set(train) | set(test))


CIFAR100_CONTENTS = tuple(
    Needed(f"cifar-100-python/{part}", cifar_batch("cifar100", part, "fine_labels", 100), CIFAR100_FILES_MD5[part])
    for part in ("train", "test")) + (
    Needed("cifar-100-python/meta", label_names("fine_label_names", 100), CIFAR100_FILES_MD5["meta"]),)
CIFAR10_CONTENTS = tuple(
    Needed(f"cifar-10-batches-py/{name}", cifar_batch("cifar10", name.rstrip("_12345"), "labels", 10), md5)
    for name, md5 in CIFAR10_FILES_MD5.items() if name != "batches.meta") + (
    Needed("cifar-10-batches-py/batches.meta", label_names("label_names", 10), CIFAR10_FILES_MD5["batches.meta"]),)


def _idx_contents(folder: str, dataset: str) -> tuple:
    return tuple(Needed(f"{folder}/raw/{split}-{kind}", idx_file(dataset, split, dims))
                 for split in ("train", "t10k") for kind, dims in (("images-idx3-ubyte", 3), ("labels-idx1-ubyte", 1)))


FIVE_CONTENTS = tuple(Needed(f"SVHN/{part}_32x32.mat", svhn_mat(part), md5) for part, md5 in SVHN_MD5.items()) \
    + _idx_contents("MNIST", "mnist") + CIFAR10_CONTENTS \
    + (Needed("notMNIST", letter_folders(("Train", "Test"), "ABCDEFGHIJ", ".png")),) \
    + _idx_contents("FashionMNIST", "fashion_mnist")

register_preparer("cifar100")(Preparer(
    "cifar100", (CIFAR100,), "{root}/cifar-100-python/{{train,test,meta}}  (torchvision CIFAR100)", check_cifar100,
    "data/cifar100", CIFAR100_CONTENTS))
register_preparer("imagenet_r")(Preparer(
    "imagenet_r", (IMAGENET_R,),
    "{root}/imagenet-r/<wnid>/<image>.jpg  (200 class folders, 30,000 images)", check_imagenet_r, "data",
    (Needed("imagenet-r", listed_files(lambda: _imagenet_r_files(), "ImageNet-R (CODA-Prompt's split)")),)))
register_preparer("cub200")(Preparer(
    "cub200", (CUB,),
    "{root}/CUB_200_2011/{{images.txt,image_class_labels.txt,train_test_split.txt,classes.txt}}\n"
    "{root}/CUB_200_2011/images/<class>/<image>.jpg  (200 classes, 11,788 images)", check_cub200, "data",
    (Needed("CUB_200_2011", check_problems(check_cub200)),)))
register_preparer("five_datasets")(Preparer(
    "five_datasets", SVHN + _idx_files("MNIST", MNIST_MIRRORS, MNIST_MD5) + (CIFAR10, NOTMNIST)
    + _idx_files("FashionMNIST", FASHION_MIRRORS, FASHION_MD5),
    "{root}/SVHN/{{train,test}}_32x32.mat\n"
    "{root}/MNIST/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte\n"
    "{root}/cifar-10-batches-py/\n"
    "{root}/notMNIST/{{Train,Test}}/{{A..J}}/*.png\n"
    "{root}/FashionMNIST/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte", check_five_datasets,
    "data/five_datasets", FIVE_CONTENTS))
