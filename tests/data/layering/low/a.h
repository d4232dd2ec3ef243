/* floor 0 */
#ifndef LOW_A_H
#define LOW_A_H
#endif
