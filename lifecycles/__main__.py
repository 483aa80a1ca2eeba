import sys

from lifecycles.cli import main

sys.exit(main())
