"""Where our data sets are published, their checksums and how each is prepared: the sources
our data-set entries declare (workloads/data/config.py, `fetch_source`), as a plugin's entry
declares its own; `runner data fetch NAME` reads them through the registry
(runner/datasets/catalog.py). Imported only when a source is asked for: it brings in the
runner's download and preparation code, which training never needs.
"""

from __future__ import annotations

from runner.datasets.catalog import DataSource
from runner.datasets.download import RemoteFile
from runner.datasets.unpack import EpsilonCache, Unpacked
from runner.datasets.wmt import WmtCorpus
from workloads.data import CIFAR10_FILES, CIFAR10_SUBDIR, WIKITEXT2_FILES, WIKITEXT2_SUBDIR

# The WMT en-de archives (runner/datasets/wmt.py says which members of each it reads); sizes
# as tensorflow/datasets records them.
_EUROPARL_V7 = RemoteFile(  # 657,632,379 bytes
    "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
    "sha256",
    "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
)
_COMMONCRAWL = RemoteFile(  # 918,311,367 bytes
    "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
    "sha256",
    "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
)
_NEWS_COMMENTARY_V11 = RemoteFile(  # 75,178,032 bytes
    "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
    "sha256",
    "cfe8ab047e05043476e498ee765c98e939c7b7d6d294e856344c84476b619d6a",
)
_NEWS_COMMENTARY_V12 = RemoteFile(  # 168,591,139 bytes
    "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
    "sha256",
    "2b45f30ef1d550d302fd17dd3a5cbe19134ccc4c2cf50c2dae534aee600101a2",
)
_NEWSTEST2014 = RemoteFile(
    "http://statmt.org/wmt14/test-full.tgz", "md5", "a8cd784e006feb32ac6f3d9ec7eb389a"
)

CIFAR10 = DataSource(
    name="cifar10",
    files=(
        RemoteFile(
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "md5",
            "c58f30108f718f92721af3b95e74349a",
        ),
    ),
    checksum_origin="the MD5 published on https://www.cs.toronto.edu/~kriz/cifar.html",
    prepare=Unpacked(CIFAR10_SUBDIR, CIFAR10_FILES),
)
EPSILON = DataSource(
    name="epsilon",
    files=(
        RemoteFile(
            "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.bz2",
            "sha256",
            "aff916d4f97f18d286558ca088d2a9f7e1fcee9376539a5aa6ef5b7ef9dfa978",
        ),
        RemoteFile(
            "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.t.bz2",
            "sha256",
            "cb299295ad11e200696eaa3050f5d8cf700eaa9c65e6aa859bda959f8669458b",
        ),
    ),
    # LIBSVM's page publishes no checksums; these are the SHA-256 digests that
    # scikit-learn_bench (Intel) and IBM's benchmark suite pin for the same URLs.
    checksum_origin="SHA-256 pinned by scikit-learn_bench and IBM's dataset loaders",
    prepare=EpsilonCache(),
    expected_rows={"train": 400_000, "test": 100_000},
)
WIKITEXT2 = DataSource(
    name="wikitext2",
    files=(
        RemoteFile(
            "https://wikitext.smerity.com/wikitext-2-v1.zip",
            "md5",
            "542ccefacc6c27f945fb54453812b3cd",
        ),
    ),
    # The archive was published at s3.amazonaws.com/research.metamind.io/wikitext/, which
    # has answered 403 Forbidden since early 2024 (pytorch/text#2247, #2255); its author,
    # Stephen Merity, serves the same file name on his own site. The MD5 is the original's,
    # so a copy that differs fails verification.
    checksum_origin="the MD5 pinned by pytorch/text (torchtext/datasets/wikitext2.py) for "
    "wikitext-2-v1.zip as published on research.metamind.io",
    prepare=Unpacked(WIKITEXT2_SUBDIR, WIKITEXT2_FILES),
)
WMT = {
    "wmt16": DataSource(
        name="wmt16",
        files=(_EUROPARL_V7, _COMMONCRAWL, _NEWS_COMMENTARY_V11, _NEWSTEST2014),
        checksum_origin="SHA-256 of the training archives pinned by tensorflow/datasets "
        "(url_checksums/wmt16_translate.txt); MD5 of test-full.tgz pinned by "
        "mjpost/sacrebleu (its wmt14/full test set)",
        prepare=WmtCorpus(),
    ),
    "wmt17": DataSource(
        name="wmt17",
        files=(_NEWS_COMMENTARY_V12, _COMMONCRAWL, _EUROPARL_V7, _NEWSTEST2014),
        checksum_origin="SHA-256 of the training archives pinned by tensorflow/datasets "
        "(url_checksums/wmt17_translate.txt); MD5 of test-full.tgz pinned by "
        "mjpost/sacrebleu (its wmt14/full test set)",
        prepare=WmtCorpus(),
    ),
}
