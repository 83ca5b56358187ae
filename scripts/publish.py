#!/usr/bin/env python
"""Export a finished training run as a Hub repository folder (and upload it): see timm_minimal.tools.hub.publish."""
import sys

from timm_minimal.tools.hub.publish import main

if __name__ == '__main__':
    sys.exit(main())
