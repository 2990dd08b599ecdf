"""mesh-tf: Mesh TensorFlow reimplemented, with an automatic layout optimizer."""

from setuptools import find_packages, setup

setup(
    name="mesh-tf",
    version="0.1.0",
    description=("Named-dim tensors lowered onto meshes of TensorFlow devices,"
                 " with a cost model and an OR-Tools layout optimizer"),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["mesh_tf", "mesh_tf.*", "autolayout",
                                    "autolayout.*", "costmodels",
                                    "costmodels.*"]),
    # Plan files are validated against their published JSON Schema.
    package_data={"autolayout.plans": ["plan_file.schema.json"]},
    install_requires=[
        "tensorflow-cpu==2.21.*",
        "numpy>=1.26,<3",
        "networkx>=3.2,<4",
        "ortools==9.15.*",
        "pandas>=2.1,<4",
        "matplotlib>=3.8,<4",
        "rich>=13,<16",
        "jsonschema>=4.18,<5",
        # Calibration fits (NNLS) and the truth statistics.
        "scipy>=1.11,<2",
        # --html: the self-contained report (plotly.js written inline).
        "plotly==6.*",
    ],
    extras_require={
        "test": [
            "pytest>=8,<10",
            # Two test processes: the suite halves on two cores (675 -> 383 s).
            "pytest-xdist==3.8.0",
            "hypothesis>=6.100,<7",
            "nbclient>=0.10,<0.12",
            "nbformat>=5.10,<6",
            "ipykernel>=6.29,<8",
            # Architecture gates (tests/test_architecture.py).
            "ruff==0.17.6",
            "import-linter==2.17",
            # The original Mesh TF, run beside ours by the compatibility
            # tests (tests/mesh_tf/compat) and benchmarks/mtf_port.py.
            "mesh-tensorflow==0.1.21",
        ],
        # Exported plans are proven in the real frameworks by the tests.
        "interop": ["jax[cpu]==0.10.2", "torch==2.13.0"],
    },
    entry_points={
        "console_scripts": [
            "mtf-demo=mesh_tf.models.demo:main",
            "mtf-layout=autolayout.cli:program",
            "mtf-worker=mesh_tf.distributed.worker:main",
        ],
    },
)
