import Media
