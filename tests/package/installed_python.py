"""The installed Python package, as a user's interpreter finds it: PREFIX/PYTHON_DIR on the path,
the library found where the package's _installed.py says (PREFIX/LIB_DIR, no MGM_C_LIBRARY), or
where MGM_C_LIBRARY says. Under the prefix /usr/local, PYTHON_DIR is on Debian's own path.
Usage: installed_python.py PREFIX BUILD_TREE_LIBRARY PYTHON_DIR LIB_DIR"""
import os
import subprocess
import sys

prefix, built = (os.path.abspath(a) for a in sys.argv[1:3])
python_dir, lib_dir = sys.argv[3:5]
site = os.path.join(prefix, python_dir)
# The folder is one Debian's interpreter searches: /usr/local's, or /usr's.
debian = ("lib/python%d.%d/dist-packages" % sys.version_info[:2], "lib/python3/dist-packages")
if python_dir not in debian:
    sys.exit("the package installs in PREFIX/%s, not in a folder of Debian's (%s)" % (python_dir, ", ".join(debian)))
probe = (
    "import multigpumem as m, os\n"
    "p = m.alloc(1 << 20, 0)\n"
    "assert p, m._lib.last_error()\n"
    "m.free(p, 1 << 20, 0)\n"
    "print(os.path.realpath(m.library_path()))\n"
    "print(os.path.realpath(m.__file__))\n"
)


def run(extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MGM_C_LIBRARY", "PYTHONPATH")}
    env.update({"PYTHONPATH": site, "MGM_C_SIM": "2x8GiB"})
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd="/", timeout=60)
    if r.returncode != 0:
        sys.exit("python failed (%s): %s%s" % (extra, r.stdout, r.stderr))
    return r.stdout.split("\n")[:2]


lib, module = run({})
want_lib = os.path.realpath(os.path.join(prefix, lib_dir, "libmultigpumem_c.so.1"))
if lib != want_lib:
    sys.exit("the installed package loaded %s, not the installed %s" % (lib, want_lib))
if not module.startswith(os.path.realpath(site) + os.sep):
    sys.exit("imported %s, not the installed package under %s" % (module, site))
lib, _ = run({"MGM_C_LIBRARY": built})
if lib != os.path.realpath(built):
    sys.exit("MGM_C_LIBRARY=%s, but %s was loaded" % (built, lib))
print("installed package loads %s; with MGM_C_LIBRARY, %s" % (want_lib, lib))
