// sofia-sip's user agent (nua), for the C shim in CSofiaShim only: Swift sees none of it.
#include <sofia-sip/su.h>
